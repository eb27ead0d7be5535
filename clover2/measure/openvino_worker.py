"""OpenVINO GenAI's side of `clover2.measure.openvino_engine`: run by the Python that has `openvino_genai`
(not clover2's), so it imports nothing of clover2.

    PYTHON openvino_worker.py MODEL_DIR PROPERTIES_JSON [PROMPT_LOOKUP_K]

loads an `LLMPipeline` on the CPU with the properties given (and prompt lookup of K tokens a step,
looking up the last 3 tokens, where K is given), prints one JSON line `{"ready": ..., "version": ...}`,
then answers each request line `{"prompt": [ids], "max_new_tokens": n}` with
`{"tokens": [ids], "steps": s, "decode_s": t}`: greedy decoding of the token ids as given (no chat
template, no tokenizer), the target's decoding steps after the prefill (its inference calls less
one), and their time. An error is answered `{"error": "..."}` and the worker goes on.
"""

import json
import os
import sys

LOOKUP_NGRAM = 3  # the n-gram prompt lookup matches, as clover2's (PromptLookupConfig.max_ngram)


def main(argv: list[str]) -> None:
    here = os.path.dirname(os.path.realpath(__file__))  # clover2's modules: `openvino` is the engine's package,
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]  # not a neighbour of this file
    import numpy as np
    import openvino as ov
    import openvino_genai as genai

    model, properties = argv[0], json.loads(argv[1])
    lookup = int(argv[2]) if len(argv) > 2 else 0
    pipe = genai.LLMPipeline(model, "CPU", **({"prompt_lookup": True} if lookup else {}), **properties)
    print(json.dumps({"ready": True, "version": genai.__version__}), flush=True)
    for line in sys.stdin:
        try:
            request = json.loads(line)
            config = genai.GenerationConfig()
            config.max_new_tokens, config.do_sample = int(request["max_new_tokens"]), False
            if lookup:
                config.num_assistant_tokens, config.max_ngram_size = lookup, LOOKUP_NGRAM
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
