// The Correct tab's canvas: runs as the `js_on_load` of a gr.HTML (`element`, `trigger` and `watch` come from Gradio).
//
// Why this exists: Gradio 6.31's ImageEditor zooms, pans and paints but reports no click positions, and every edit
// round-trips its three full images and resets the zoom; gr.Image reports clicks but cannot zoom or paint. So the
// corrected answer is shown here, in a viewport that zooms (wheel, +/-, 0) and pans (drag with a click tool, Space +
// drag or the middle button, arrow keys), and clicks and brush strokes go to Python as "select" events:
//   {kind: "click", tool, x, y}            x, y: the image's own pixels, edges at 0 and width (Gradio's convention)
//   {kind: "stroke", tool, points, radius}  points: [[x, y], ...] pixel centres (pixel c is centred on c), radius px
//   {kind: "box", tool, x1, y1, x2, y2}     two opposite corners, pixel edges like a click (any order; may lie off
//                                          the photo: Python clips the box, and refuses one with no area on it)
//   {kind: "deselect"}                      Escape: nothing selected, so the next click or stroke makes a new mask
// The tool is the checked input of the tool picker (#canvas-tool, in TOOLS order); the brush diameter is #brush-size.
// With the box tool a drag draws the box; a tap without a drag sets one corner (a cross shows it) and the next tap
// the opposite one, so a phone can draw a box with two taps. Esc or another tool drops a lone corner.
// Keyboard shortcuts (listed on the page) work while the Correct tab shows and no text-entry field has the focus (a
// focused radio, check box or slider keeps only the keys it uses itself: arrows, Home/End, Page Up/Down).
//
// An annotator's inputs are never dropped, and are applied in the order given: Gradio ignores a new trigger of an
// event while its previous one is pending, so every edit sent from here (a click, a stroke, Esc, and the keys that
// press Undo, Redo, Delete or Outlines) waits in one queue and is sent when the answer to the one before has arrived
// (`window.__sam3CanvasAnswered`, run by a `.then` of those events in layout.py). A pending click shows at once as a
// ring, a pending stroke stays drawn, and the zoom bar counts the edits still to apply.
const TOOLS = __TOOLS__;
const BRUSHES = ["paint", "erase"];
const view = {scale: 1, x: 0, y: 0, width: 0, height: 0, boxWidth: 0, boxHeight: 0};
let drag = null;
let spaceDown = false;
let corner = null;  // the box tool's first corner, [x, y] image pixels, while it waits for the second tap
const DRAG_PX = 4;  // screen pixels a press moves before it is a drag (a pan, or a box) rather than a click or tap
const ANSWER_WAIT_MS = 60000;  // an answer that never comes (a lost connection) holds the queue this long at most
// one queue per page, even if Gradio mounts this component again
const edits = window.__sam3CanvasEdits || (window.__sam3CanvasEdits = {waiting: [], sent: null, timer: null});

const viewport = () => element.querySelector(".cv-viewport");
const image = () => element.querySelector(".cv-image");
const strokes = () => element.querySelector(".cv-strokes");

function tool() {
  const inputs = Array.from(document.querySelectorAll("#canvas-tool input[type=radio]"));
  const index = inputs.findIndex((input) => input.checked);
  return TOOLS[index] || TOOLS[0];
}

function setTool(index) {
  const inputs = document.querySelectorAll("#canvas-tool input[type=radio]");
  if (inputs[index]) inputs[index].click();
}

function brushRadius() {
  const input = document.querySelector("#brush-size input[type=number]");
  const size = Number(input ? input.value : 16);
  return Math.max(1, (Number.isFinite(size) ? size : 16) / 2);
}

function nudgeBrush(step) {
  const input = document.querySelector("#brush-size input[type=range]");
  if (!input) return;
  input.value = String(Math.min(Number(input.max), Math.max(Number(input.min), Number(input.value) + step)));
  input.dispatchEvent(new Event("input", {bubbles: true}));
  input.dispatchEvent(new Event("change", {bubbles: true}));
}

function apply() {
  const stage = element.querySelector(".cv-stage");
  if (stage) stage.style.transform = `translate(${view.x}px, ${view.y}px) scale(${view.scale})`;
  const level = element.querySelector(".cv-level");
  if (level) level.textContent = `${Math.round(view.scale * 100)}%`;
  drawMarks();  // the rings keep their size on screen
}

function fit() {
  const box = viewport();
  if (!box || !view.width || !box.clientWidth || !box.clientHeight) return;  // hidden tab: fit once it shows
  view.boxWidth = box.clientWidth;
  view.boxHeight = box.clientHeight;
  view.scale = Math.min(box.clientWidth / view.width, box.clientHeight / view.height);
  view.x = (box.clientWidth - view.width * view.scale) / 2;
  view.y = (box.clientHeight - view.height * view.scale) / 2;
  apply();
}

function zoomAt(factor, cx, cy) {
  const box = viewport();
  if (!box) return;
  if (cx === undefined) [cx, cy] = [box.clientWidth / 2, box.clientHeight / 2];
  const scale = Math.min(32, Math.max(0.05, view.scale * factor));
  const k = scale / view.scale;
  view.x = cx - (cx - view.x) * k;
  view.y = cy - (cy - view.y) * k;
  view.scale = scale;
  apply();
}

function pan(dx, dy) {
  view.x += dx;
  view.y += dy;
  apply();
}

// After every new value (an edit redraws the answer): keep the zoom, refit only for a new photo size.
function adopt() {
  const img = image();
  if (!img) return;
  const width = Number(img.getAttribute("width"));
  const height = Number(img.getAttribute("height"));
  if (width !== view.width || height !== view.height) {
    view.width = width;
    view.height = height;
    fit();
  } else {
    apply();
  }
  showPending();  // the new answer's canvas shows what is still pending
}

// A pointer position in the image's own pixels (edges at 0 and width), whatever the zoom and pan.
function toImage(event) {
  const rect = image().getBoundingClientRect();
  return [(event.clientX - rect.left) * view.width / rect.width, (event.clientY - rect.top) * view.height / rect.height];
}

function inside([x, y]) {
  return x >= 0 && y >= 0 && x < view.width && y < view.height;
}

function strokePath(context, points, radius) {
  // black edge, white core: visible on any photo and never a mask colour
  for (const [color, extra] of [["rgba(0,0,0,0.75)", 2 / view.scale + 1], ["rgba(255,255,255,0.7)", 0]]) {
    context.strokeStyle = color;
    context.lineWidth = 2 * radius + extra;
    context.beginPath();
    points.forEach(([x, y], i) => (i ? context.lineTo(x + 0.5, y + 0.5) : context.moveTo(x + 0.5, y + 0.5)));
    if (points.length === 1) context.lineTo(points[0][0] + 0.51, points[0][1] + 0.5);
    context.stroke();
  }
}

function frame(context, x1, y1, x2, y2) {
  // black edge, white core, like a stroke: visible on any photo
  for (const [color, width] of [["rgba(0,0,0,0.85)", 4], ["rgba(255,255,255,0.95)", 2]]) {
    context.strokeStyle = color;
    context.lineWidth = width / view.scale;
    context.strokeRect(Math.min(x1, x2), Math.min(y1, y2), Math.abs(x2 - x1), Math.abs(y2 - y1));
  }
}

function cross(context, x, y) {
  const arm = 9 / view.scale;
  for (const [color, width] of [["rgba(0,0,0,0.85)", 4], ["rgba(255,255,255,0.95)", 2]]) {
    context.strokeStyle = color;
    context.lineWidth = width / view.scale;
    context.beginPath();
    context.moveTo(x - arm, y);
    context.lineTo(x + arm, y);
    context.moveTo(x, y - arm);
    context.lineTo(x, y + arm);
    context.stroke();
  }
}

function ring(context, x, y) {
  const r = 7 / view.scale;  // 7 screen pixels at any zoom
  for (const [color, width] of [["rgba(0,0,0,0.85)", 4], ["rgba(255,255,255,0.95)", 2]]) {
    context.strokeStyle = color;
    context.lineWidth = width / view.scale;
    context.beginPath();
    context.arc(x, y, r, 0, 2 * Math.PI);
    context.stroke();
  }
}

// The pending edits (rings for clicks, strokes as drawn) and the stroke being drawn.
function drawMarks() {
  const canvas = strokes();
  if (!canvas) return;
  const context = canvas.getContext("2d");
  context.clearRect(0, 0, canvas.width, canvas.height);
  context.lineCap = "round";
  context.lineJoin = "round";
  const pending = [edits.sent, ...edits.waiting].filter((item) => item && item.mark);
  for (const {mark} of pending) {
    if (mark.kind === "stroke") strokePath(context, mark.points, mark.radius);
    else if (mark.kind === "box") frame(context, mark.x1, mark.y1, mark.x2, mark.y2);
    else ring(context, mark.x, mark.y);
  }
  if (drag && drag.kind === "stroke") strokePath(context, drag.points, drag.radius);
  if (drag && drag.kind === "box" && drag.dragged) frame(context, ...drag.at, ...drag.to);
  if (corner) cross(context, ...corner);
}

function showPending() {
  const count = (edits.sent ? 1 : 0) + edits.waiting.length;
  const bar = element.querySelector(".cv-zoom");
  let badge = element.querySelector(".cv-pending");
  if (bar && !badge) {
    badge = document.createElement("span");
    badge.className = "cv-pending";
    bar.prepend(badge);
  }
  if (badge) {
    const applying = count ? `Applying ${count} edit${count === 1 ? "" : "s"}...` : "";
    badge.textContent = corner ? `${applying} Box: tap the opposite corner`.trim() : applying;
    badge.hidden = !count && !corner;
  }
  drawMarks();
}

// Send the next waiting edit unless one is on its way; `send` returns false when there was nothing to send (a
// disabled button), and the next one goes at once.
function pump() {
  while (!edits.sent && edits.waiting.length) {
    const item = edits.waiting.shift();
    if (item.send()) {
      edits.sent = item;
      edits.timer = setTimeout(window.__sam3CanvasAnswered, ANSWER_WAIT_MS);
    }
  }
  showPending();
}

function enqueue(send, mark = null) {
  edits.waiting.push({send, mark});
  pump();
}

// The answer to the edit sent last has arrived (its outputs are applied): send the next one after the page has
// redrawn, so a button it presses is enabled or disabled as the answer left it.
window.__sam3CanvasAnswered = () => {
  clearTimeout(edits.timer);
  edits.sent = null;
  setTimeout(pump, 0);
};

element.addEventListener("click", (event) => {
  const button = event.target.closest("[data-zoom]");
  if (!button) return;
  const what = button.dataset.zoom;
  if (what === "in") zoomAt(1.25);
  else if (what === "out") zoomAt(0.8);
  else fit();
});

element.addEventListener("pointerdown", (event) => {
  const box = event.target.closest(".cv-viewport");
  if (!box || !image() || event.target.closest(".cv-zoom")) return;
  box.focus({preventScroll: true});
  box.setPointerCapture(event.pointerId);
  const chosen = tool();
  const panning = event.button === 1 || spaceDown;
  if (BRUSHES.includes(chosen) && !panning && event.button === 0) {
    const [x, y] = toImage(event);
    drag = {kind: "stroke", tool: chosen, radius: brushRadius(), points: [[x - 0.5, y - 0.5]]};
    drawMarks();
  } else if (chosen === "box" && !panning && event.button === 0) {
    drag = {kind: "box", tool: chosen, sx: event.clientX, sy: event.clientY, at: toImage(event), to: toImage(event),
            dragged: false};
  } else {
    drag = {kind: panning ? "pan" : "press", tool: chosen, sx: event.clientX, sy: event.clientY, x0: view.x,
            y0: view.y, at: toImage(event)};
  }
  event.preventDefault();
});

element.addEventListener("pointermove", (event) => {
  if (!drag) return;
  if (drag.kind === "stroke") {
    const [x, y] = toImage(event);
    const [px, py] = drag.points[drag.points.length - 1];
    if (Math.hypot(x - 0.5 - px, y - 0.5 - py) >= 1) {
      drag.points.push([x - 0.5, y - 0.5]);
      drawMarks();
    }
    return;
  }
  const dx = event.clientX - drag.sx;
  const dy = event.clientY - drag.sy;
  if (drag.kind === "box") {
    drag.to = toImage(event);
    drag.dragged = drag.dragged || Math.hypot(dx, dy) > DRAG_PX;
    drawMarks();
    return;
  }
  if (drag.kind === "press" && Math.hypot(dx, dy) > DRAG_PX) drag.kind = "pan";  // a click tool drags to pan
  if (drag.kind === "pan") {
    view.x = drag.x0 + dx;
    view.y = drag.y0 + dy;
    apply();
  }
});

function sendBox(tool, [x1, y1], [x2, y2]) {
  const value = {kind: "box", tool, x1, y1, x2, y2};
  enqueue(() => { trigger("select", {index: null, value}); return true; }, {kind: "box", x1, y1, x2, y2});
}

function release() {
  const done = drag;
  drag = null;
  if (!done) return;
  if (done.kind === "box") {
    if (done.dragged) {
      corner = null;
      sendBox(done.tool, done.at, done.to);
    } else if (corner) {  // the second tap: the opposite corner
      const first = corner;
      corner = null;
      sendBox(done.tool, first, done.at);
    } else {
      corner = done.at;
      showPending();
    }
  } else if (done.kind === "stroke") {
    const points = done.points.map(([x, y]) => [Math.round(x * 100) / 100, Math.round(y * 100) / 100]);
    const value = {kind: "stroke", tool: done.tool, points, radius: done.radius};
    enqueue(() => { trigger("select", {index: null, value}); return true; }, {kind: "stroke", points: done.points,
                                                                           radius: done.radius});
  } else if (done.kind === "press" && inside(done.at)) {
    const [x, y] = done.at;
    enqueue(() => { trigger("select", {index: [x, y], value: {kind: "click", tool: done.tool, x, y}}); return true; },
            {kind: "click", x, y});
  }
}

element.addEventListener("pointerup", release);
element.addEventListener("pointercancel", () => { drag = null; drawMarks(); });

element.addEventListener("wheel", (event) => {
  const box = event.target.closest(".cv-viewport");
  if (!box || !image()) return;
  event.preventDefault();
  const rect = box.getBoundingClientRect();
  zoomAt(event.deltaY < 0 ? 1.2 : 1 / 1.2, event.clientX - rect.left, event.clientY - rect.top);
}, {passive: false});

// Inputs that take no typed text: a shortcut typed while one has the focus is still a shortcut.
const NOT_TEXT = ["button", "checkbox", "color", "file", "image", "radio", "range", "reset", "submit"];
const CONTROL_KEYS = ["ArrowLeft", "ArrowRight", "ArrowUp", "ArrowDown", "Home", "End", "PageUp", "PageDown"];

function typing(target) {
  if (!target || !target.tagName) return false;
  if (target.isContentEditable || ["TEXTAREA", "SELECT"].includes(target.tagName)) return true;
  return target.tagName === "INPUT" && !NOT_TEXT.includes((target.getAttribute("type") || "text").toLowerCase());
}

// a focused radio, check box or slider moves with these keys itself
function ownKey(target, key) {
  return target && target.tagName === "INPUT" && CONTROL_KEYS.includes(key);
}

// Press a button (or tick a check box) of the tab in turn with the other edits; a disabled one is skipped.
function press(selector) {
  enqueue(() => {
    const target = document.querySelector(selector);
    if (!target || target.disabled) return false;
    target.click();
    return true;
  });
}

const KEYS = {
  "1": () => setTool(0), "2": () => setTool(1), "3": () => setTool(2), "4": () => setTool(3),
  "5": () => setTool(4), "6": () => setTool(5), "b": () => setTool(4), "e": () => setTool(5),
  "z": () => press("#undo-btn"), "y": () => press("#redo-btn"), "Z": () => press("#redo-btn"),
  "Delete": () => press("#delete-btn"), "Backspace": () => press("#delete-btn"),
  "o": () => press("#outline-mode input"), "[": () => nudgeBrush(-4), "]": () => nudgeBrush(4),
  "+": () => zoomAt(1.25), "=": () => zoomAt(1.25), "-": () => zoomAt(0.8), "0": fit,
  "ArrowLeft": () => pan(60, 0), "ArrowRight": () => pan(-60, 0), "ArrowUp": () => pan(0, 60),
  "ArrowDown": () => pan(0, -60),
  "7": () => setTool(6),
  "Escape": () => {
    if (corner) {  // a lone box corner is dropped first; the selection stays
      corner = null;
      showPending();
      return;
    }
    enqueue(() => { trigger("select", {index: null, value: {kind: "deselect"}}); return true; });
  },
};

// A mouse click on Undo, Redo or Delete while edits wait joins the queue behind them (never ahead of them).
const QUEUED_BUTTONS = "#undo-btn, #redo-btn, #delete-btn";

function onKey(event) {
  if (element.offsetParent === null || typing(event.target) || ownKey(event.target, event.key) || event.altKey
      || event.metaKey) return;
  if (event.key === " ") {
    spaceDown = true;
    if (event.target.closest && event.target.closest(".cv-viewport")) event.preventDefault();
    return;
  }
  const key = event.ctrlKey ? ({z: "z", y: "y", Z: "Z"})[event.key] : event.key;
  const action = key && KEYS[key];
  if (!action) return;
  event.preventDefault();
  action();
}
// one listener per page, even if Gradio mounts this component again
if (window.__sam3CanvasKeys) document.removeEventListener("keydown", window.__sam3CanvasKeys);
window.__sam3CanvasKeys = onKey;
document.addEventListener("keydown", onKey);
function onButton(event) {
  const button = event.isTrusted && event.target.closest && event.target.closest(QUEUED_BUTTONS);
  if (!button || !(edits.sent || edits.waiting.length)) return;
  event.preventDefault();
  event.stopImmediatePropagation();
  press(`#${button.id}`);
}
if (window.__sam3CanvasButtons) document.removeEventListener("click", window.__sam3CanvasButtons, true);
window.__sam3CanvasButtons = onButton;
document.addEventListener("click", onButton, true);
document.addEventListener("keyup", (event) => { if (event.key === " ") spaceDown = false; });
// another tool drops a lone box corner (one listener per page, as above)
function onToolChange(event) {
  if (corner && event.target.closest && event.target.closest("#canvas-tool")) {
    corner = null;
    showPending();
  }
}
if (window.__sam3CanvasTool) document.removeEventListener("change", window.__sam3CanvasTool);
window.__sam3CanvasTool = onToolChange;
document.addEventListener("change", onToolChange);

watch("value", adopt);
// The viewport gets its size when the tab first shows (or the window changes): fit again then, not on every edit.
new ResizeObserver(() => {
  const box = viewport();
  if (box && view.width && (box.clientWidth !== view.boxWidth || box.clientHeight !== view.boxHeight)) fit();
}).observe(element);
adopt();
