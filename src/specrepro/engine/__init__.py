"""Engine runs on real vLLM and SGLang, by concern: ``run`` (running engines: sweeps, profiled passes, acceptance
traces, the plugin's wrappers), ``check`` (engine arguments and hooks against the pinned engines' source),
``models`` (building models: stand-ins, GGUF conversion, trained drafters, the PyTorch oracle) and ``results``
(analysing engine results: metrics, cost fits, memory). What a job is and passes is :mod:`specrepro.jobspec`.
"""
