"""Running engines: vLLM sweeps, profiled passes, keep-one acceptance traces, the vLLM plugin's wrappers and the SGLang sweep; their verbs."""
