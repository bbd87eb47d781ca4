// Step 5, "The trained model": the loss curves of flashbox's trainer and of the PyTorch reference on
// one inline SVG chart (x: tokens seen, y: loss in nats per token), the final numbers in words, the
// largest gap between the curves at the steps both logged, text sampled at a few checkpoints, and
// which model the GPT-2 table below it was measured on. The data is steps.gpt2_training, the document
// `flashbox gpt2 curves` writes (docs/report-schema.md); without one the section says so in one line.
import { h, val } from './dom.js';
import { fmtInt, fmtNum } from './format.js';

const SVG_NS = 'http://www.w3.org/2000/svg';
const PATH = 'steps.gpt2_training';
const COMMAND = '`flashbox gpt2 curves --log run.jsonl --out training.json`, then ' +
  '`flashbox report --training training.json`';
// Chart geometry in viewBox units; the SVG scales to the width of the page.
const W = 720;
const HT = 340;
const M = { left: 52, right: 14, top: 12, bottom: 42 };
const COLORS = { flashbox: '#d62828', reference: '#1d6fb8' };

// Text with `backquoted` commands, as text and <code> nodes.
export function withCode(text) {
  return text.split('`').map((part, i) => (i % 2 ? h('code', {}, part) : part)).filter((x) => x !== '');
}

function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) el.setAttribute(k, String(v));
  for (const c of children.flat()) if (c !== null && c !== undefined) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

// 1,234 -> "1.23k", 345,000,000 -> "345M", 1.2e9 -> "1.2B": tokens on an axis.
export function fmtTokens(n) {
  const a = Math.abs(n);
  for (const [div, unit] of [[1e9, 'B'], [1e6, 'M'], [1e3, 'k']]) {
    if (a >= div) return `${Number((n / div).toPrecision(3))}${unit}`;
  }
  return String(n);
}

// About `count` round ticks (1, 2 or 5 times a power of ten) covering [lo, hi].
export function niceTicks(lo, hi, count) {
  const span = hi - lo;
  if (!(span > 0)) return [lo];
  const raw = span / count;
  const p = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * p).find((x) => x >= raw);
  const ticks = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push(Number(t.toPrecision(12)));
  return ticks;
}

// "M x y L x y ...": one command per point, so a path's points can be counted from its d.
export function pathData(xs, ys, sx, sy) {
  return xs.map((x, i) => `${i ? 'L' : 'M'}${sx(x).toFixed(1)} ${sy(ys[i]).toFixed(1)}`).join(' ');
}

function curveSeries(run, role) {
  const out = [];
  if (!run) return out;
  out.push({ id: `${role}-train`, role, kind: 'train', label: `${run.label} training loss`, curve: run.train });
  if (run.val && run.val.step.length) {
    out.push({ id: `${role}-val`, role, kind: 'val', label: `${run.label} validation loss`, curve: run.val });
  }
  return out;
}

// Extremes by a loop: a run of tens of thousands of points is too many arguments for Math.max(...x).
function extent(arrays) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const a of arrays) for (const v of a) { if (v < lo) lo = v; if (v > hi) hi = v; }
  return [lo, hi];
}

// Ticks of a log axis: 1, 2 and 5 times the powers of ten inside [lo, hi].
export function logTicks(lo, hi) {
  const out = [];
  for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e += 1) {
    for (const m of [1, 2, 5]) {
      const t = m * 10 ** e;
      if (t >= lo && t <= hi) out.push(t);
    }
  }
  return out;
}

// logX: tokens on a log axis, which spreads out the first steps, where the loss falls fastest.
function drawChart(series, readout, logX) {
  const [xMin, xTop] = extent(series.map((c) => c.curve.tokens));
  const xMax = xTop || 1;
  const [yLo, yHi] = extent(series.map((c) => c.curve.loss));
  const pad = (yHi - yLo) * 0.05 || 0.5;
  const y0 = yLo - pad;
  const y1 = yHi + pad;
  const l0 = Math.log10(Math.max(1, xMin));
  const l1 = Math.max(l0 + 1e-9, Math.log10(xMax));
  const sx = logX ? (x) => M.left + ((Math.log10(x) - l0) / (l1 - l0)) * (W - M.left - M.right)
    : (x) => M.left + (x / xMax) * (W - M.left - M.right);
  const sy = (y) => HT - M.bottom - ((y - y0) / (y1 - y0)) * (HT - M.top - M.bottom);
  const grid = s('g', { class: 'grid' });
  for (const t of niceTicks(y0, y1, 6)) {
    grid.append(s('line', { x1: M.left, x2: W - M.right, y1: sy(t), y2: sy(t) }),
      s('text', { x: M.left - 6, y: sy(t) + 4, 'text-anchor': 'end' }, fmtNum(t)));
  }
  for (const t of logX ? logTicks(10 ** l0, xMax) : niceTicks(0, xMax, 6)) {
    grid.append(s('line', { x1: sx(t), x2: sx(t), y1: M.top, y2: HT - M.bottom }),
      s('text', { x: sx(t), y: HT - M.bottom + 16, 'text-anchor': 'middle' }, fmtTokens(t)));
  }
  const axes = s('g', { class: 'axes' },
    s('text', { x: (M.left + W - M.right) / 2, y: HT - 6, 'text-anchor': 'middle' }, `tokens seen${logX ? ' (log scale)' : ''}`),
    s('text', { x: 14, y: (M.top + HT - M.bottom) / 2, 'text-anchor': 'middle',
      transform: `rotate(-90 14 ${(M.top + HT - M.bottom) / 2})` }, 'loss (nats per token)'));
  const lines = series.map((c) => {
    const color = COLORS[c.role];
    const g = s('g', { class: `series ${c.kind}`, 'data-series': c.id },
      s('path', { d: pathData(c.curve.tokens, c.curve.loss, sx, sy), fill: 'none', stroke: color,
        'stroke-width': c.kind === 'val' ? 2 : 1.2, 'stroke-dasharray': c.role === 'reference' ? '6 4' : null,
        'data-series': c.id, 'data-points': c.curve.step.length }));
    if (c.kind === 'val') {
      const r = c.curve.step.length > 40 ? 2 : 3.2;  // many validations: small marks, the line stays readable
      c.curve.tokens.forEach((x, i) => g.append(s('circle', { cx: sx(x), cy: sy(c.curve.loss[i]), r,
        fill: c.role === 'reference' ? '#fff' : color, stroke: color, 'stroke-width': 1.5 })));
    }
    return g;
  });
  const cursor = s('line', { class: 'cursor', y1: M.top, y2: HT - M.bottom, visibility: 'hidden' });
  const svg = s('svg', { viewBox: `0 0 ${W} ${HT}`, id: 'training-svg', role: 'img', 'data-scale': logX ? 'log' : 'linear',
    'aria-label': 'Training and validation loss against tokens seen' }, grid, axes, ...lines, cursor);

  // The readout: the logged point nearest the pointer, flashbox's and the reference's loss at that step.
  const main = series[0];
  const other = series.find((c) => c.role === 'reference' && c.kind === 'train');
  const otherAt = new Map(other ? other.curve.step.map((st, i) => [st, other.curve.loss[i]]) : []);
  const show = (i) => {
    const st = main.curve.step[i];
    const x = main.curve.tokens[i];
    cursor.setAttribute('x1', sx(x));
    cursor.setAttribute('x2', sx(x));
    cursor.setAttribute('visibility', 'visible');
    const ref = otherAt.has(st) ? `, ${other.label} ${otherAt.get(st).toFixed(4)}` : '';
    readout.textContent = `step ${fmtInt(st)} (${fmtTokens(x)} tokens): ${main.label} ${main.curve.loss[i].toFixed(4)}${ref}`;
  };
  svg.addEventListener('pointermove', (e) => {
    const box = svg.getBoundingClientRect();
    const x = ((e.clientX - box.left) / box.width) * W;
    const f = (x - M.left) / (W - M.left - M.right);
    const tokens = logX ? 10 ** (l0 + f * (l1 - l0)) : f * xMax;
    const t = main.curve.tokens;
    let lo = 0;
    let hi = t.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (t[mid] < tokens) lo = mid + 1; else hi = mid;
    }
    if (lo > 0 && tokens - t[lo - 1] < t[lo] - tokens) lo -= 1;
    show(lo);
  });
  svg.addEventListener('pointerleave', () => cursor.setAttribute('visibility', 'hidden'));
  return svg;
}

// flashbox − reference at every step both logged (the gap the words state, drawn).
export function sharedDiff(a, b) {
  const at = new Map(b.step.map((st, i) => [st, b.loss[i]]));
  const tokens = [];
  const diff = [];
  a.step.forEach((st, i) => {
    if (at.has(st)) {
      tokens.push(a.tokens[i]);
      diff.push(a.loss[i] - at.get(st));
    }
  });
  return { tokens, diff };
}

// The difference on a scale of hundredths, where the loss chart cannot show it, with dashed lines at
// ±0.02 nats: how close issue 46 asks the two curves to stay.
function drawGap(d, label) {
  const H2 = 190;
  const xMax = extent([d.tokens])[1] || 1;
  const [lo, hi] = extent([d.diff]);
  const lim = Math.max(0.02, Math.abs(lo), Math.abs(hi)) * 1.15;
  const sx = (x) => M.left + (x / xMax) * (W - M.left - M.right);
  const sy = (y) => H2 - M.bottom - ((y + lim) / (2 * lim)) * (H2 - M.top - M.bottom);
  const grid = s('g', { class: 'grid' });
  for (const t of niceTicks(-lim, lim, 4)) {
    grid.append(s('line', { x1: M.left, x2: W - M.right, y1: sy(t), y2: sy(t) }),
      s('text', { x: M.left - 6, y: sy(t) + 4, 'text-anchor': 'end' }, fmtNum(t)));
  }
  for (const t of niceTicks(0, xMax, 6)) {
    grid.append(s('text', { x: sx(t), y: H2 - M.bottom + 16, 'text-anchor': 'middle' }, fmtTokens(t)));
  }
  const bars = [0.02, -0.02].map((b) => s('line', { class: 'bar', x1: M.left, x2: W - M.right, y1: sy(b), y2: sy(b) }));
  return s('svg', { viewBox: `0 0 ${W} ${H2}`, id: 'training-gap-svg', role: 'img',
    'aria-label': `flashbox minus ${label} training loss at each shared step` }, grid, ...bars,
  s('text', { class: 'axis', x: (M.left + W - M.right) / 2, y: H2 - 6, 'text-anchor': 'middle' },
    `flashbox − ${label} training loss (nats) against tokens seen; dashed: ±0.02`),
  s('path', { d: pathData(d.tokens, d.diff, sx, sy), fill: 'none', stroke: '#7b2cbf', 'stroke-width': 1.2,
    'data-series': 'gap-train', 'data-points': d.tokens.length }));
}

function runWords(run, role) {
  const p = `${PATH}.${role}.final`;
  const f = run.final;
  const parts = [`${run.label}${run.config ? ` (${run.config}` : ''}${run.config && run.device ? ` on ${run.device}` : ''}` +
    `${run.config ? ')' : ''}: `, val(f.tokens, fmtInt(f.tokens), `${p}.tokens`), ' tokens seen in ',
  val(f.step, fmtInt(f.step), `${p}.step`), ' steps'];
  if (f.val_loss !== null && f.val_loss !== undefined) {
    parts.push(', final validation loss ', val(f.val_loss, f.val_loss.toFixed(4), `${p}.val_loss`),
      ' nats per token', f.val_step !== f.step ? ` (at step ${fmtInt(f.val_step)})` : '',
      f.val_tokens ? ` on ${fmtInt(f.val_tokens)} held-out tokens` : '');
  } else {
    parts.push(', last training loss ', val(f.loss, f.loss.toFixed(4), `${p}.loss`), ' nats per token (no validation logged)');
  }
  return h('li', { dataset: { run: role } }, parts, '.');
}

function gapWords(doc) {
  const g = doc.gap;
  if (!doc.reference) return h('p', { id: 'training-gap', class: 'note' }, withCode(`No PyTorch curve: ${doc.reference_note || 'no reference log'}.`));
  if (!g || !g.train) {
    return h('p', { id: 'training-gap', class: 'note' }, withCode(doc.reference_note || 'The two runs logged no step in common.'));
  }
  const parts = ['Largest gap between the training curves at the ', val(g.train.points, fmtInt(g.train.points), `${PATH}.gap.train.points`),
    ' steps both logged: |flashbox − ', doc.reference.label, '| = ', val(g.train.max_abs, fmtNum(g.train.max_abs), `${PATH}.gap.train.max_abs`),
    ` nats at step ${fmtInt(g.train.at_step)}`];
  if (g.val) {
    parts.push('; validation: ', val(g.val.max_abs, fmtNum(g.val.max_abs), `${PATH}.gap.val.max_abs`),
      ` over ${fmtInt(g.val.points)} validation${g.val.points === 1 ? '' : 's'}`);
  }
  return h('p', { id: 'training-gap' }, parts, '.');
}

function sampleList(samples) {
  if (!samples || !samples.length) {
    return h('p', { class: 'note', id: 'training-samples' }, withCode('No generated samples in this run document ' +
      '(`flashbox gpt2 generate --json` at a checkpoint, passed to `flashbox gpt2 curves --samples`).'));
  }
  const items = samples.map((x, i) => {
    const c = x.checkpoint || {};
    const where = c.step !== undefined ? `step ${fmtInt(c.step)}${c.tokens !== undefined ? ` (${fmtTokens(c.tokens)} tokens)` : ''}`
      : (c.file || 'checkpoint not recorded');
    const how = x.temperature === 0 ? 'greedy' : `temperature ${fmtNum(x.temperature)}, top-k ${x.top_k}, seed ${x.seed}`;
    return h('li', { class: 'sample', dataset: { index: i, path: `${PATH}.samples.${i}` } },
      h('div', { class: 'sample-head' }, h('b', {}, where), ` · ${how} · ${fmtInt(x.new_tokens)} new tokens`),
      h('p', { class: 'sample-text' }, h('span', { class: 'prompt' }, x.prompt), h('span', { class: 'continuation' }, x.text)));
  });
  return h('ol', { class: 'samples', id: 'training-samples' }, items);
}

function swapWords(run, gpt2) {
  const t = gpt2 && gpt2.measured ? gpt2.trained : null;
  if (t && t.steps === run.final.step) {
    return h('p', { id: 'training-swap' }, `The GPT-2 table below is on this run's final checkpoint (step ${fmtInt(t.steps)}, ` +
      `${gpt2.weights}): naive, blocked and flash attention on the model that learned.`);
  }
  if (t) {
    return h('p', { id: 'training-swap' }, `The GPT-2 table below is on a checkpoint of step ${fmtInt(t.steps)}; this run ends at ` +
      `step ${fmtInt(run.final.step)}.`);
  }
  return h('p', { id: 'training-swap', class: 'note' }, withCode('The GPT-2 table below is not on this run\'s model: ' +
    '`flashbox report --weights run/model_N.bin --tokens val.bin --training training.json` measures it on the final checkpoint.'));
}

function gapChart(step) {
  if (!step.reference || !step.gap || !step.gap.train) return null;
  return h('div', { class: 'svg-chart gap' }, drawGap(sharedDiff(step.flashbox.train, step.reference.train), step.reference.label));
}

export function renderTraining(out, step, gpt2) {
  if (!step || !step.measured) {
    const reason = step && step.reason ? step.reason : '';
    const line = reason.includes('flashbox gpt2 curves') ? `No training run in this report: ${reason}.`
      : `No training run in this report${reason ? ` (${reason})` : ''}: ${COMMAND} puts one here.`;
    out.replaceChildren(h('p', { class: 'not-measured', id: 'training-none' }, withCode(line)));
    return;
  }
  const readout = h('p', { class: 'note', id: 'training-readout' }, 'Point at the chart to read a step\'s losses.');
  const series = [...curveSeries(step.flashbox, 'flashbox'), ...curveSeries(step.reference, 'reference')];
  const chartBox = h('div', { class: 'svg-chart' }, drawChart(series, readout, false));
  const scale = (logX) => {
    chartBox.replaceChildren(drawChart(series, readout, logX));
    linear.setAttribute('aria-pressed', String(!logX));
    log.setAttribute('aria-pressed', String(logX));
  };
  const linear = h('button', { type: 'button', class: 'toggle', id: 'training-linear', 'aria-pressed': 'true', onclick: () => scale(false) }, 'Tokens: linear');
  const log = h('button', { type: 'button', class: 'toggle', id: 'training-log', 'aria-pressed': 'false', onclick: () => scale(true) }, 'log scale');
  const scaleButtons = h('div', { class: 'buttons', role: 'group', 'aria-label': 'Tokens axis' }, linear, log);
  const legend = h('ul', { class: 'legend', id: 'training-legend' }, series.map((c) => h('li', {},
    h('i', { class: `sw line ${c.kind} ${c.role}`, style: `border-color: ${COLORS[c.role]}` }), c.label)));
  out.replaceChildren(
    h('ul', { class: 'run-words', id: 'training-summary' }, runWords(step.flashbox, 'flashbox'),
      step.reference ? runWords(step.reference, 'reference') : null),
    scaleButtons, chartBox,
    legend, readout, gapWords(step), gapChart(step),
    h('h4', {}, 'Generated text'),
    h('p', { class: 'note' }, withCode('Sampled by `flashbox gpt2 generate` through the KV cache at checkpoints of the run; ' +
      'the prompt in bold, then the model\'s continuation.')),
    sampleList(step.samples), swapWords(step.flashbox, gpt2));
}
