"""The search agent's protocol: its prompts, the actions a turn asks for, the rewards, the QA datasets it is asked, and the tree files its rollouts are stored in."""
