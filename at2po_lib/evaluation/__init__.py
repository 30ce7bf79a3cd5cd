"""Evaluating a policy and comparing methods: greedy per-question outcomes, the statistics over seeds and questions, the paper's published numbers."""
