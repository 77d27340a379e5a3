"""Regenerate the recorded AI Hub profile shapes in this folder (not a test; run by hand).

The files are what ``ProfileJob.download_profile(filename)`` writes: qai-hub turns the server's
``ProfileDetail`` protobuf into a dict with its own ``_profile_pb_to_python_dict`` and saves it
with ``json.dump`` (tuples become lists). We build the protobufs here with realistic values and
pass them through that same function of the installed client, so the field names and nesting
are the client's, not our guess. The values are made up (no token was available); they are
shaped after AI Hub's published numbers for small models on Snapdragon 8 Gen 2/3 phones.

    pip install --target /tmp/qaihub qai-hub protobuf==6.31.1
    PYTHONPATH=/tmp/qaihub python tests/data/qai_hub/make_profiles.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import qai_hub
from qai_hub import public_api_pb2 as pb
from qai_hub.client import _profile_pb_to_python_dict

HERE = Path(__file__).parent
UNIT = {"NPU": pb.COMPUTE_UNIT_NPU, "GPU": pb.COMPUTE_UNIT_GPU, "CPU": pb.COMPUTE_UNIT_CPU}


def _memory(increase: tuple[int, int], peak: tuple[int, int]) -> pb.ProfileDetail.MemoryUsage:
    return pb.ProfileDetail.MemoryUsage(increase=pb.Range(lower=increase[0], upper=increase[1]),
                                        peak=pb.Range(lower=peak[0], upper=peak[1]))


def _layers(detail: pb.ProfileDetail, layers: list[tuple[str, str, str, int | None]]) -> None:
    for name, kind, unit, time_us in layers:
        layer = detail.layer_details.add(name=name, layer_type_name=kind, compute_unit=UNIT[unit])
        if time_us is not None:
            layer.execution_time = time_us
            layer.execution_cycles = time_us * 1400  # HTP clock about 1.4 GHz


def bert_tiny_qnn_v1_2() -> pb.ProfileDetail:
    """bert-tiny (2 layers, hidden 128), batch 1, seq 128, qnn_context_binary fp16: all on the NPU."""
    rng = random.Random(1)
    times = [rng.randint(182, 231) for _ in range(100)]  # microseconds, 100 profiler iterations
    detail = pb.ProfileDetail(
        major_version=1, minor_version=2,
        execution_time=min(times),
        after_execution_peak_memory=7_340_032,
        cold_load_time=152_310, warm_load_time=21_874, compile_time=0,
        after_cold_load_peak_memory=14_999_552, after_warm_load_peak_memory=9_437_184,
        after_compile_peak_memory=0,
    )
    detail.compile_memory.CopyFrom(_memory((0, 0), (0, 0)))
    detail.cold_load_memory.CopyFrom(_memory((9_437_184, 14_680_064), (12_582_912, 14_999_552)))
    detail.warm_load_memory.CopyFrom(_memory((0, 4_194_304), (8_388_608, 9_437_184)))
    detail.execution_memory.CopyFrom(_memory((0, 450_560), (6_291_456, 7_340_032)))
    detail.all_cold_load_times.extend([152_310])
    detail.all_warm_load_times.extend([21_874, 22_410, 21_902, 23_118, 22_051])
    detail.all_execution_times.extend(times)
    layers = [("/embeddings/word_embeddings/Gather", "Gather", "NPU", 4),
              ("/embeddings/Add", "ElementWiseAdd", "NPU", 2),
              ("/embeddings/LayerNorm/LayerNormalization", "LayerNorm", "NPU", 3)]
    for i in range(2):
        p = f"/encoder/layer.{i}"
        layers += [(f"{p}/attention/self/query/MatMul", "FullyConnected", "NPU", 9),
                   (f"{p}/attention/self/key/MatMul", "FullyConnected", "NPU", 9),
                   (f"{p}/attention/self/value/MatMul", "FullyConnected", "NPU", 9),
                   (f"{p}/attention/self/MatMul", "MatMul", "NPU", 14),
                   (f"{p}/attention/self/Softmax", "Softmax", "NPU", 11),
                   (f"{p}/attention/self/MatMul_1", "MatMul", "NPU", 13),
                   (f"{p}/attention/output/LayerNorm/LayerNormalization", "LayerNorm", "NPU", 3),
                   (f"{p}/intermediate/dense/MatMul", "FullyConnected", "NPU", 12),
                   (f"{p}/intermediate/intermediate_act_fn/Gelu", "Gelu", "NPU", 5),
                   (f"{p}/output/dense/MatMul", "FullyConnected", "NPU", 12),
                   (f"{p}/output/LayerNorm/LayerNormalization", "LayerNorm", "NPU", 3)]
    layers += [("/pooler/dense/Gemm", "FullyConnected", "NPU", 2), ("/pooler/activation/Tanh", "Tanh", "NPU", 1)]
    _layers(detail, layers)
    return detail


def mobilenet_tflite_v1_1() -> pb.ProfileDetail:
    """A MobileNet-style net compiled to tflite: NPU with GPU and CPU fallbacks, no per-iteration times."""
    detail = pb.ProfileDetail(
        major_version=1, minor_version=1,
        execution_time=1_012,
        after_execution_peak_memory=12_582_912,
        cold_load_time=1_284_552, warm_load_time=301_117, compile_time=0,
        after_cold_load_peak_memory=48_234_496, after_warm_load_peak_memory=31_457_280,
        after_compile_peak_memory=0,
    )
    detail.cold_load_memory.CopyFrom(_memory((31_457_280, 47_185_920), (40_894_464, 48_234_496)))
    detail.warm_load_memory.CopyFrom(_memory((0, 8_388_608), (29_360_128, 31_457_280)))
    detail.execution_memory.CopyFrom(_memory((0, 1_048_576), (11_534_336, 12_582_912)))
    # compile_memory left unset: the client reports its ranges as None
    layers = [(f"conv_{i}", "CONV_2D", "NPU", None) for i in range(52)]
    layers += [(f"depthwise_{i}", "DEPTHWISE_CONV_2D", "NPU", None) for i in range(17)]
    layers += [("resize_0", "RESIZE_BILINEAR", "GPU", None), ("resize_1", "RESIZE_BILINEAR", "GPU", None),
               ("argmax", "ARG_MAX", "CPU", None)]
    _layers(detail, layers)
    return detail


def legacy_v0() -> pb.ProfileDetail:
    """A version-0 profile (jobs from 2023 clients): one time, compile peak memory, no ranges, no layers."""
    return pb.ProfileDetail(execution_time=3_547, load_time=512_004, peak_memory_usage=105_906_176)


def main() -> None:
    for name, make in (("bert_tiny_qnn_context_binary_v1_2", bert_tiny_qnn_v1_2),
                       ("mobilenet_tflite_v1_1", mobilenet_tflite_v1_1),
                       ("legacy_v0", legacy_v0)):
        profile = _profile_pb_to_python_dict(make())
        (HERE / f"{name}.json").write_text(json.dumps(profile, indent=1) + "\n")
        print(f"{name}.json (qai-hub {qai_hub.__version__})")


if __name__ == "__main__":
    main()
