"""Images made from masks: post-processing of SAM 3's masks and what the model is shown (numbered overlays, the
verifier's views).

- ``postprocess``: filtering, sorting and boxes of SAM 3's masks.
- ``draw``: drawing primitives (mask colours, fill, contour, label box, ``DrawStyle``).
- ``resample``: a photo crop resized for a view, to the same pixels on every CPU.
- ``regions``: each mask's pixels over its box, from a bool array or a mask set (RLE), decoded once per view.
- ``labels``: where each mask's number goes and how big it is drawn, at any count (``overlay_labels``).
- ``legibility``: the VLM's pixel bounds (``PixelBounds``), the size it sees an image at, and the share of labels it
  can read (``legible_share``).
- ``overlay``: the numbered overlay, at full size or shrunk for a page.
- ``enlarged``: a dense set's overlay drawn at the VLM's pixel budget (the default: two images a main request).
- ``tiles``: a dense set's extra view, opt-in (``AgentConfig.dense_tiles``): the overlay cut into four enlarged,
  overlapping tiles with the same numbers.
- ``verify_views``: the verifier's views, drawn at the size the VLM's processor uses: the photo small with one mask
  (locate), the close-up of one mask, the photo with a group of masks numbered (group).
- ``views``: the single-mask and zoom views of renderers up to 3, and ``MaskView`` (the recipe a trace stores of
  any view, overlay, tiles and the verifier's views included; ``RENDERER_VERSION``).

May import: the ground floor only.
"""
