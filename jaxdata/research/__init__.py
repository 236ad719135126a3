"""Research helpers from the data-mixing literature.

Its modules::

    mixing.py   the DoReMi domain-weight update, importance weights, per-source losses
    online.py   controllers that steer the mixture while training (EXP3, DoReMi online)
"""
