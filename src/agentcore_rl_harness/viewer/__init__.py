"""`agentcore-rl view`: a web viewer over run directories (live, paged, and as a static bundle)."""
