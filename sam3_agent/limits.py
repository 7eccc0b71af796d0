"""Run limits shared by the agent and every front end.

Kept free of imports (no torch, no Gradio, not even numpy), so a front end can show them, e.g. in
``python -m sam3_agent --help`` or ``python app.py --help``, before any model library loads. Each default lives
here once; the modules that apply it import it from here.
"""

DEFAULT_MAX_ROUNDS = 30  # the round budget of a run unless one is given
MAX_ROUNDS_LIMIT = 100  # the largest round budget a run accepts (CLI, app and library alike)
# The longest query a run accepts (characters, after control tokens are removed: ``messages.checked_query``). A query
# names what to segment in a sentence or a few; the limit keeps a pasted document out of every main request, which
# re-sends the query each round.
MAX_QUERY_CHARS = 2000

# Default bounds on an image's pixel count after resizing: Qwen's recommended range in the Qwen2-VL /
# Qwen2.5-VL model cards and qwen-vl-utils (min_pixels = 256*28*28, max_pixels = 1280*28*28), i.e.
# 256..1280 tokens of 28*28 px for Qwen2.5-VL and ~196..980 tokens of 32*32 px for Qwen3-VL. Released
# checkpoints allow far more (Qwen3-VL: 16.7 M px, over 16k tokens per image).
DEFAULT_MIN_PIXELS = 256 * 28 * 28
DEFAULT_MAX_PIXELS = 1280 * 28 * 28

MAX_IMAGE_PIXELS = 64_000_000  # decompression-bomb cap on an input photo (pixels); configurable per call
DEFAULT_SCORE_THRESHOLD = 0.5  # SAM 3 detection score cut of segment_phrase: the reference agent's default
DEFAULT_VERIFY_BATCH_SIZE = 8  # masks verified per batch; the tool's usual 1-10 masks take one or two batches
# Masks per call of examine_each_mask with in_groups. Eight, because the answer must hold a line per mask
# ("Mask 12: <verdict>Accept</verdict>", about 12 tokens) after its reasoning within the verification token budget
# (256 on a ZeroGPU Space): 8 lines leave ~160 tokens to reason, 16 would leave ~60; and 8 masks keep their labels
# at full size (the overlay shrinks labels above 20) in 8 clearly different colours.
VERIFY_GROUP_SIZE = 8

# The images of one main request: the raw photo and the latest numbered overlay, as in the reference agent (which
# asserts it on every request; the SAM 3 paper's figures are for that design). ``agent.context`` checks it on every
# request it builds. A dense set keeps within it: its overlay is drawn at the VLM's pixel budget (``imaging.enlarged``).
MAX_MAIN_IMAGES = 2
# Opt-in (``AgentConfig.dense_tiles``, ``--dense-tiles``): a dense set's overlay also comes as four enlarged tiles
# (``imaging.tiles``: the photo in 2 x 2 parts), so such a request holds six images, and a VLM server must allow six.
DENSE_VIEW_TILES = 4
MAX_MAIN_IMAGES_WITH_TILES = MAX_MAIN_IMAGES + DENSE_VIEW_TILES
# A verification request: the photo, the photo small with the mask drawn, the mask's close-up (``agent.verify``). So a
# VLM server must allow max(MAX_MAIN_IMAGES, VERIFY_IMAGES) = 3 images a request by default, 6 with the tiles.
VERIFY_IMAGES = 3
SERVER_IMAGE_LIMIT = max(MAX_MAIN_IMAGES, VERIFY_IMAGES)
