"""The demo ``make run`` loads (``manage.py load_demo``), apart from the engine.

Its accounts, its run profiles, its runs (one of each state the console shows) and the fixture
planner's proposals they share. What belongs here: demo data and its loaders; production code
reads only the account list (``agentconsole.checks`` refuses demo passwords).
"""
