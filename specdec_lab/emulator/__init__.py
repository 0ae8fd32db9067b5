"""Engine emulator: speaks vLLM's and trtllm-serve's CLI and HTTP API with a physical timing model.

No GPU is needed: a decode step costs weight bytes / memory bandwidth (plus a compute term that
grows with the batch), prefill is compute-bound, speculation adds drafter cost and accepts draft
tokens per position with seeded probabilities. Run it as::

    python3 -m specdec_lab.emulator vllm serve MODEL [vLLM flags]
    python3 -m specdec_lab.emulator vllm --version
    python3 -m specdec_lab.emulator trtllm-serve MODEL [trtllm-serve flags]
    python3 -m specdec_lab.emulator.hf download REPO          # emulated `hf download`

``argv[0]`` may also be a path ending in ``vllm`` or ``trtllm-serve`` (lab hosts install wrappers
``/usr/local/bin/vllm`` and ``/usr/local/bin/trtllm-serve`` that exec the module), and
``specdec lab engine --device ID -- vllm serve ...`` calls `launch.run` directly.

Knobs come only from the engine's environment:

``SPECDEC_EMU_ENGINE_VERSION``
    the engine release to emulate (a lab image sets it, as the real image carries its engine);
    default: the release of the device's default catalog image. Each release refuses what it
    refuses for real (`specdec.engines`), with its own error text.
``SPECDEC_EMU_DEVICE``
    catalog device id (or the emulator-only ``h100-sxm``); default: identify this machine.
``SPECDEC_EMU_TIME_SCALE``
    wall seconds per emulated second (default 1.0; 0.05 makes everything 20x faster, ratios kept).
``SPECDEC_EMU_FAULT``
    comma-separated faults: ``crash_at_start`` (exit non-zero after a short startup log),
    ``slow_start:S`` (S extra real seconds before loading), ``hang_after:N`` (after N answered
    generation requests every connection is accepted and never answered), ``5xx_burst:START:COUNT``
    (generation requests START..START+COUNT-1, 1-based, get HTTP 500), ``slowdown:F`` (every
    engine step gets slower by the fraction F per completed request), ``oom`` (CUDA out of memory
    after loading the weights, exit non-zero).
``SPECDEC_EMU_SEED``
    integer seed for acceptance draws and generated text (default 0).
``SPECDEC_EMU_ACCEPTANCE``
    the speculation world: ``chain`` (default) or ``measured`` (acceptance that is not an exact
    chain, drafting cost concave in k: `specdec_lab.emulator.acceptance`, a second world for testing
    the tuner's model).
``SPECDEC_EMU_RESERVED_GIB``
    memory other processes hold on the device (counts against free memory at startup).

The HF token is read only from the file named by ``HF_TOKEN_PATH`` (or ``HF_TOKEN``/``$HF_HOME``),
only to check gated repos, and is never printed.
"""
