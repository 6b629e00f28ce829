"""Layer 5, analysis: arrays in, numbers out. The fits and intervals of the bound's constants, the
particle-number budget, Richardson's reading of the step-halving studies, and the paper's statements judged on
them.

Imports: model.
"""
