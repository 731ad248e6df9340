"""The commands ``cli`` dispatches to that need more than a screenful (layer 6 of ARCHITECTURE.md, with
``cli``): what every command shares (which config file, the settings with the flags, the task files and
their warnings) in :mod:`.common`, and the two that execute a batch, ``run`` and ``resume``, in
:mod:`.batch`. ``cli`` owns the parser and the exit codes.
"""
