"""Hand correction of an agent's answer: edit replay with undo/redo (``edits``), brush strokes turned into masks
(``strokes``), and the exports (COCO JSON, PNG masks, a bundle that imports back: ``export``).

May import: the ground floor and ``trace``.
"""
