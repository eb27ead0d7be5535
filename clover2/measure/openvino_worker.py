"""OpenVINO GenAI's side of `clover2.measure.openvino_engine`: run by the Python that has `openvino_genai`
(not clover2's), so it imports nothing of clover2.

    PYTHON openvino_worker.py MODEL_DIR PROPERTIES_JSON SPECULATION_JSON

loads an `LLMPipeline` on the CPU with the properties given and the speculation asked for (`prompt_lookup`:
true, or `draft`: an OpenVINO draft model's folder, loaded with the same properties; `generation`: the
generation config's fields, such as `num_assistant_tokens`; {} for plain decoding), prints one JSON line
`{"ready": ..., "version": ...}`, then answers each request line `{"prompt": [ids], "max_new_tokens": n}`
with `{"tokens": [ids], "steps": s, "decode_s": t}`: greedy decoding of the token ids as given (no chat
template, no tokenizer), the target's decoding steps after the prefill (its inference calls less one),
and their time. An error is answered `{"error": "..."}` and the worker goes on.
"""

import json
import os
import sys


def main(argv: list[str]) -> None:
    here = os.path.dirname(os.path.realpath(__file__))  # clover2's modules: `openvino` is the engine's package,
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]  # not a neighbour of this file
    import numpy as np
    import openvino as ov
    import openvino_genai as genai

    model, properties, speculation = argv[0], json.loads(argv[1]), json.loads(argv[2])
    setup = {"prompt_lookup": True} if speculation.get("prompt_lookup") else {}
    if "draft" in speculation:
        setup["draft_model"] = genai.draft_model(speculation["draft"], "CPU", **properties)
    pipe = genai.LLMPipeline(model, "CPU", **setup, **properties)
    print(json.dumps({"ready": True, "version": genai.__version__}), flush=True)
    for line in sys.stdin:
        try:
            request = json.loads(line)
            config = genai.GenerationConfig()
            config.max_new_tokens, config.do_sample = int(request["max_new_tokens"]), False
            for field, value in speculation.get("generation", {}).items():
                setattr(config, field, value)
            ids = np.array([request["prompt"]], dtype=np.int64)
            result = pipe.generate(genai.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids))), config)
            metrics = result.perf_metrics
            reply = {"tokens": [int(t) for t in result.tokens[0]],
                     "steps": len(metrics.raw_metrics.token_infer_durations) - 1,  # the first is the prefill
                     "decode_s": (metrics.get_generate_duration().mean - metrics.get_ttft().mean) / 1000}
        except Exception as e:  # noqa: BLE001 - said to the caller, who raises it as its own error
            reply = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
