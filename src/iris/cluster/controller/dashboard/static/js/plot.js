// Line charts drawn as SVG: time on x, one line per series, a legend underneath.
import { h, s } from "./dom.js";

const WIDTH = 640;
const HEIGHT = 180;
const PAD = { left: 56, right: 12, top: 10, bottom: 24 };
const COLORS = ["#2563eb", "#16a34a", "#dc2626", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563"];

function niceMax(value) {
  if (value <= 0) return 1;
  const magnitude = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) {
    if (step * magnitude >= value) return step * magnitude;
  }
  return 10 * magnitude;
}

function timeLabel(ms) {
  return new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

// series: [{name, points: [[timeMs, value], ...], color?}]
// With `integer`, the axis stops at an even whole number so that its middle line is whole too.
export function lineChart({ title, series, format = String, integer = false, empty = "No samples yet." }) {
  const all = series.flatMap((line) => line.points);
  const figure = h("figure", { class: "chart", "data-title": title }, h("figcaption", {}, title));
  if (all.length === 0) {
    figure.append(h("p", { class: "muted" }, empty));
    return figure;
  }
  const t0 = Math.min(...all.map((p) => p[0]));
  const t1 = Math.max(...all.map((p) => p[0]), t0 + 1000);
  const top = niceMax(Math.max(...all.map((p) => p[1])));
  const yMax = integer ? Math.max(2, Math.ceil(top / 2) * 2) : top;
  const x = (t) => PAD.left + ((t - t0) / (t1 - t0)) * (WIDTH - PAD.left - PAD.right);
  const y = (v) => HEIGHT - PAD.bottom - (v / yMax) * (HEIGHT - PAD.top - PAD.bottom);
  const grid = [0, yMax / 2, yMax].map((v) =>
    s(
      "g",
      { class: "grid" },
      s("line", { x1: PAD.left, x2: WIDTH - PAD.right, y1: y(v), y2: y(v) }),
      s("text", { x: PAD.left - 6, y: y(v) + 4, "text-anchor": "end" }, format(v)),
    ),
  );
  const axis = s(
    "g",
    { class: "axis" },
    s("text", { x: PAD.left, y: HEIGHT - 6, "text-anchor": "start" }, timeLabel(t0)),
    s("text", { x: WIDTH - PAD.right, y: HEIGHT - 6, "text-anchor": "end" }, timeLabel(t1)),
  );
  const lines = series.map((line, i) => {
    const color = line.color || COLORS[i % COLORS.length];
    const coords = line.points.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`);
    const last = line.points[line.points.length - 1];
    return s(
      "g",
      { class: "series", "data-series": line.name },
      line.points.length > 1 ? s("polyline", { points: coords.join(" "), stroke: color, fill: "none" }) : null,
      last ? s("circle", { cx: x(last[0]), cy: y(last[1]), r: 3, fill: color }, s("title", {}, `${line.name}: ${format(last[1])}`)) : null,
    );
  });
  figure.append(
    s("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img", "aria-label": title }, grid, axis, lines),
    h(
      "div",
      { class: "legend" },
      series.map((line, i) => {
        const last = line.points[line.points.length - 1];
        return h(
          "span",
          {},
          h("i", { style: `background:${line.color || COLORS[i % COLORS.length]}` }),
          `${line.name}${last ? ` ${format(last[1])}` : ""}`,
        );
      }),
    ),
  );
  return figure;
}
