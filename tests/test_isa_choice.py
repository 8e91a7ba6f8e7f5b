"""Which lesser CPUs `make test-isa` stands in for, from the host's /proc/cpuinfo flags."""

import platform

import pytest

from scripts import test_isa  # `make test-isa`'s script (the repository root is on pytest's path)

AVX2 = {"sse4_1", "avx2", "fma"}
AVX512 = AVX2 | {"avx512f", "avx512bw", "avx512vl", "avx512dq"}


@pytest.mark.parametrize("flags, expected", [
    (AVX2, ["native", "avx2", "default"]),  # an AVX2 laptop
    (AVX512, ["native", "avx2", "default"]),  # AVX-512 without bf16: native is that AVX-512
    (AVX512 | {"avx512_bf16"}, ["native", "avx512", "avx2", "default"]),  # AMD EPYC (Zen 4)
    (AVX512 | {"avx512_bf16", "amx_bf16", "amx_tile"}, ["native", "avx512_bf16", "avx512", "avx2", "default"]),
    ({"sse4_1"}, ["native", "default"]),
])
def test_the_isas_a_host_stands_in_for(monkeypatch, flags, expected):
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    assert [isa.name for isa in test_isa.emulable(flags)] == expected


def test_an_arm_host_runs_its_own_set_only(monkeypatch):
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    assert [isa.name for isa in test_isa.emulable(AVX512 | {"avx512_bf16", "amx_bf16"})] == ["native"]

