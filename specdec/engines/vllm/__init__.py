"""vLLM: `facts` (what each release accepts, with sources: shared vocabulary, shipped into the
lab's images), `engine` (`VllmEngine`: its command line, environment and readiness) and
`metrics` (the Prometheus names `specdec watch` reads). May import as `specdec.engines` says."""
