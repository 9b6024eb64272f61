"""Generative reward models: templates, sampling, parsers, voting, position control, verifiers.

``load`` and ``build_judge`` return a ``Judge`` (the protocol every mode's class implements) and
pull in no heavy dependency until a judge actually needs its model.
"""

from grm.judges.base import Judge
from grm.judges.errors import JudgeError
from grm.judges.runtime import build_judge, load
from grm.judges.types import JudgeResult, Sample, SampleRecord

__all__ = ["Judge", "JudgeError", "JudgeResult", "Sample", "SampleRecord", "build_judge", "load"]
