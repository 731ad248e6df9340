"""The run directory on disk (layer 1 of ARCHITECTURE.md): its layout and documents (:mod:`.docs`),
each job's writes (:mod:`.store`), one writer per run (:mod:`.lock`), room kept for the last
writes (:mod:`.reserve`) and the removal of old runs (:mod:`.prune`).

Imports only ``config`` and the plain-data modules (layer 0); every layer above may import it.
"""
