"""Hand correction of an agent's answer: edit replay with undo/redo (``edits``), the edits SAM 3's point-prompt model
makes from clicks or a box (``prompted``), brush strokes turned into masks (``strokes``), and the exports: COCO JSON,
PNG masks, a bundle that imports back (``export``), masks as polygons (``polygons``) and YOLO segmentation labels
(``yolo``); ``saved``: loading whatever the product saved, bundles included (the public ``sam3_agent.load_trace``).

May import: the ground floor, ``sam.prompts`` (the checks of clicks and boxes) and ``trace``.
"""
