"""`samplers/config.py`: the `sampler` node builds the in-process sampler as it is set."""

from agentcore_rl_harness.config import compose_config


def test_the_sampler_node_builds_the_in_process_sampler_as_composed(tiny_model_dir):
    from agentcore_rl_harness.models import load_model

    node = compose_config(["model=tiny", "sampler.max_batch_size=3", "sampler.batch_wait_s=0.25",
                           "sampler.prefix_cache_tokens=0"]).typed.sampler
    sampler = node.local_sampler(load_model(tiny_model_dir))
    try:
        assert (sampler.max_batch_size, sampler.batch_wait_s, sampler._prefix_cache) == (3, 0.25, None)
    finally:
        sampler.close()
