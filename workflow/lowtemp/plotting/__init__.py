"""Layer 7, plotting: the figures of an experiment and their report captions (``figures``), the convergence figure
(``convergence``), the animation of the tokens (``animation``) and the claims page
(``summary``: every experiment's verdicts in Markdown), drawn from datasets already read; they never
recompute physics, and the stages read the files and write the drawings.

Imports: analysis, config, store.
"""
