"""Generative reward models: templates, sampling, parsers, voting, position control, verifiers.

``Judge`` and ``load`` pull in no heavy dependency until a judge actually needs its model.
"""

from grm.judges.errors import JudgeError
from grm.judges.runtime import Judge, load
from grm.judges.types import JudgeResult, Sample, SampleRecord

__all__ = ["Judge", "JudgeError", "JudgeResult", "Sample", "SampleRecord", "load"]
