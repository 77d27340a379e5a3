"""Hardware probes of the targets a runtime other than torch addresses (openvino, onnxruntime,
qnn), one module each, listed in the ``pytest_hwbench.hardware`` entry-point group like a third
party's: importing a module registers its probe (`pytest_hwbench.hardware.register_probe`)."""
