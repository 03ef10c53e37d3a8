"""``conch_play``: scripted chats played together, printed the same every run.

scenario.py reads and checks a scenario file; player.py plays it in a child
process of its own, pages.py serves its web pages and presses.py makes the
person's presses; report.py reads what happened and render.py prints it.
"""
