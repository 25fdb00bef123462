"""LoRARequest has vLLM's fields in vLLM's order (``lora_name, lora_int_id, lora_path,
base_model_name, tensorizer_config_dict, load_inplace, is_3d_lora_weight``): a positional
call lands each value where vLLM puts it, and the fields not built are refused by name."""

from __future__ import annotations

import msgspec
import pytest

from actorllm.core.lora import LoRARequest


def test_positional_fields_in_vllms_order() -> None:
    r = LoRARequest("sql", 1, "/a/sql", "base", None, True, False)
    assert (r.base_model_name, r.tensorizer_config_dict, r.load_inplace) == ("base", None, True)
    assert r.is_3d_lora_weight is False
    back = msgspec.msgpack.decode(msgspec.msgpack.encode(r), type=LoRARequest)
    assert back.load_inplace is True and back.base_model_name == "base"


@pytest.mark.parametrize(
    ("args", "kwargs", "names"),
    [
        (("sql", 1, "/a/sql", None, {"tensorizer_dir": "/t"}), {}, "tensorizer_config_dict"),
        (("sql", 1, "/a/sql"), {"tensorizer_config_dict": {}}, "tensorizer_config_dict"),
        (("sql", 1, "/a/sql"), {"is_3d_lora_weight": True}, "is_3d_lora_weight=True"),
    ],
)
def test_fields_not_built_are_refused_by_name(args: tuple, kwargs: dict, names: str) -> None:
    with pytest.raises(ValueError, match="'sql'") as info:
        LoRARequest(*args, **kwargs)
    assert names in str(info.value)
