"""The runtime LoRA routes are in the OpenAPI document exactly when they are served."""

from __future__ import annotations

from actorllm.entrypoints.openai.openapi import Served, openapi_document


def test_lora_routes_documented_only_when_enabled() -> None:
    off = openapi_document(dev_mode=False, api_key=False, served=Served(64, 100, "fcfs"))
    assert "/v1/load_lora_adapter" not in off["paths"]
    on = openapi_document(
        dev_mode=False, api_key=True, served=Served(64, 100, "fcfs", runtime_lora=True)
    )
    for path in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter"):
        op = on["paths"][path]["post"]
        assert {"200", "400", "401", "404"} <= set(op["responses"])
        assert op["security"] == [{"bearer": []}]
    body = on["paths"]["/v1/load_lora_adapter"]["post"]["requestBody"]
    ref = body["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    props = on["components"]["schemas"][ref]["properties"]
    assert set(props) == {"lora_name", "lora_path", "load_inplace", "is_3d_lora_weight"}
