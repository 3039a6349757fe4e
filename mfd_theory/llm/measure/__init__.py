"""Measurement: decoding cells timed and scored, predictions made before decoding, baselines.

``evaluate.py`` and ``evaluate_batch.py`` (the evaluator, one request or a batch at a time),
``predict.py`` and ``batch_predict.py`` (predictions written before the evaluation), ``batch_trace.py``
(greedy traces for the batch simulator), ``profile.py``
(the round cost model), ``ceiling.py`` (the target's own trees), ``assisted.py`` (Hugging Face's
assisted generation), ``spec_bench.py`` (Spec-Bench answer files). Design: docs/results.md.
"""

from mfd_theory.llm.measure.batch_trace import decode_traces
from mfd_theory.llm.measure.evaluate import Cell, decode_cells, make_cells, rows_from_records
from mfd_theory.llm.measure.predict import calibrate_acceptance, predict_cells, prediction_check
from mfd_theory.llm.measure.profile import measure_round_profile

__all__ = ["Cell", "calibrate_acceptance", "decode_cells", "decode_traces", "make_cells", "measure_round_profile",
           "predict_cells", "prediction_check", "rows_from_records"]
