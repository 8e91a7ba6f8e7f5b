"""The reference cookbook's `eval.inspect_utils`: the Inspect model API over any sampling client
(the same class as `eval.inspect_bridge.InspectAPIFromTinkerSampling`)."""

from eval.inspect_bridge import InspectAPIFromTinkerSampling

__all__ = ["InspectAPIFromTinkerSampling"]
