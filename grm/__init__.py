"""grm: RLAIF with generative reward models.

Importing ``grm`` is cheap: torch, ray, transformers and deepspeed are imported only by the
modules that need them (engines, training, orchestrator).
"""

__version__ = "0.1.0"
