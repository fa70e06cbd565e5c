"""The run core: plan cases, run episodes, score them, train, finish the run. No pytest here.

`run.compose` is the one composition root (sampler, gateway, runtime, trainer from the typed
config); every other module takes those parts as arguments, so each is unit-tested with the
shipped fakes (`samplers.scripted`, `runtimes.fake`).
"""
