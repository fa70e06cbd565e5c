"""The gateway package's public names are pinned."""

import agentcore_rl_harness.gateway as gateway


def test_public_names():
    assert sorted(gateway.__all__) == ["ChatTemplateRenderer", "FinishedSession", "GatewayConfig",
                                       "GatewayServer", "Renderer", "SessionStore"]
    assert all(hasattr(gateway, name) for name in gateway.__all__)
