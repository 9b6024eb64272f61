"""Model store: builtin aliases, local directories and hub ids (see ``grm.models.store``)."""

from grm.models.store import ALIASES, ModelStoreError, fetch, gguf_path, grm_home, list_models, model_dir
from grm.models.trained import resolve_model

__all__ = ["ALIASES", "ModelStoreError", "fetch", "gguf_path", "grm_home", "list_models", "model_dir", "resolve_model"]
