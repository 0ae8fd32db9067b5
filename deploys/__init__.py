"""The deploy files users run with pyinfra (`specdec.deploys` in the wheel): ``specdec.py``
converges a host, ``recover.py`` puts every host back on its last-good release."""
