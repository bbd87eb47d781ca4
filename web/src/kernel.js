// Step 4: the kernels' real source (embedded at build time) with region highlights, and the
// correctness table of `flashbox check`.
import { $, h, notMeasured, table } from './dom.js';
import { fmtInt, fmtMs, fmtNum } from './format.js';

export const REGIONS = [
  ['load_q', 'Load Q'],
  ['kv_loop', 'Loop over K/V'],
  ['s_tile', 'S tile = Q·Kᵀ'],
  ['online_softmax', 'Online softmax update'],
  ['pv', 'P·V product'],
  ['finalize', 'Final division and LSE'],
];

const OPEN = /\/\/\s*>>>\s*report:([A-Za-z_]+)/;
const CLOSE = /\/\/\s*<<<\s*report:([A-Za-z_]+)/;

// { name: [[firstLine, lastLine], ...] } with 1-based lines of the code between the markers.
export function parseRegions(text) {
  const regions = {};
  const open = {};
  text.split('\n').forEach((line, index) => {
    const n = index + 1;
    let m = line.match(OPEN);
    if (m) open[m[1]] = n;
    m = line.match(CLOSE);
    if (m && open[m[1]] !== undefined) {
      (regions[m[1]] = regions[m[1]] || []).push([open[m[1]] + 1, n - 1]);
      delete open[m[1]];
    }
  });
  return regions;
}

function renderSources(sources) {
  const files = (sources && sources.files) || [];
  const tabs = $('src-tabs');
  const code = $('src-code');
  const status = $('src-status');
  const buttons = REGIONS.map(([name, label]) =>
    h('button', { type: 'button', class: 'region', dataset: { region: name } }, label));
  $('src-regions').replaceChildren(...buttons);
  let current = null;
  let lines = [];
  let regions = {};

  function showFile(file) {
    current = file;
    for (const t of tabs.children) t.setAttribute('aria-selected', String(t.dataset.path === file.path));
    if (!file.present) {
      code.replaceChildren();
      lines = [];
      regions = {};
      status.replaceChildren(h('b', {}, file.path), ': absent from the source tree this flashbox was built from.');
    } else {
      const text = file.text.replace(/\n$/, '');
      regions = parseRegions(text);
      lines = text.split('\n').map((line, i) =>
        h('span', { class: 'line', dataset: { line: i + 1 } }, h('span', { class: 'ln' }, String(i + 1)), line, '\n'));
      code.replaceChildren(...lines);
      status.replaceChildren(h('b', {}, file.path), ` · ${fmtInt(lines.length)} lines · pick a part to highlight`);
    }
    for (const b of buttons) {
      const have = Boolean(regions[b.dataset.region]);
      b.disabled = !have;
      b.title = have ? '' : 'no such marked region in this file';
      b.setAttribute('aria-pressed', 'false');
    }
  }

  function highlight(name) {
    for (const b of buttons) b.setAttribute('aria-pressed', String(b.dataset.region === name));
    for (const l of lines) l.classList.remove('hl');
    const ranges = regions[name] || [];
    let count = 0;
    for (const [a, b] of ranges) {
      for (let n = a; n <= b; n += 1) {
        lines[n - 1].classList.add('hl');
        count += 1;
      }
    }
    const label = REGIONS.find(([r]) => r === name)[1];
    status.replaceChildren(h('b', {}, current.path), ` · ${label}: lines `,
      h('span', { id: 'src-range', dataset: { ranges: JSON.stringify(ranges) } }, ranges.map(([a, b]) => `${a}–${b}`).join(', ')),
      ` (${count} lines)`);
    if (ranges.length) {
      const first = lines[ranges[0][0] - 1];
      code.scrollTop = Math.max(0, first.offsetTop - 24);  // pre.code is the lines' offsetParent
    }
  }

  for (const b of buttons) b.addEventListener('click', () => highlight(b.dataset.region));
  if (!files.length) {
    status.textContent = 'This page was written without kernel sources.';
    for (const b of buttons) b.disabled = true;
    return;
  }
  for (const f of files) {
    const tab = h('button', { type: 'button', role: 'tab', class: f.present ? 'tab' : 'tab absent',
      dataset: { path: f.path } }, f.path.split('/').pop(), f.present ? '' : ' (absent)');
    tab.addEventListener('click', () => showFile(f));
    tabs.append(tab);
  }
  showFile(files.find((f) => f.present) || files[0]);
}

function renderCheck(check, machine) {
  const out = $('check-body');
  if (!check || !check.measured) {
    out.replaceChildren(notMeasured(check ? check.reason : 'the report has no check step'));
    return;
  }
  const c = check.config;
  $('check-config').textContent = `Random q/k/v, each implementation against the reference: batch ${c.batch}, ` +
    `${c.heads_q} query heads, ${c.heads_kv} K/V heads, T = ${fmtInt(c.seqlen_q)}${c.seqlen_k !== c.seqlen_q ? ` × ${fmtInt(c.seqlen_k)}` : ''}, ` +
    `head_dim ${c.head_dim}, ${c.dtype}${c.causal ? ', causal' : ''}, seed ${c.seed}. ` +
    `T = ${fmtInt(c.seqlen_q)} ${c.seqlen_q % 64 ? 'is not a multiple of 64, so the boundary blocks are exercised' : 'is a multiple of 64'}. ` +
    (check.warmup_calls ? `Time: one call after ${check.warmup_calls} untimed warm-up call${check.warmup_calls === 1 ? '' : 's'} ` +
      '(step 5 has the timings proper).' : 'Time: the first call, one-time start-up included (a report from before warm-ups).');
  const rows = check.rows.map((r, i) => h('tr', { class: r.passed ? 'pass' : 'fail' },
    h('td', {}, r.device), h('td', {}, r.impl), h('td', {}, h('code', {}, r.kernel)),
    h('td', { class: 'n', dataset: { value: r.max_abs_error, path: `steps.check.rows.${i}.max_abs_error` } }, fmtNum(r.max_abs_error)),
    h('td', { class: 'n', dataset: { value: r.rel_error, path: `steps.check.rows.${i}.rel_error` } }, fmtNum(r.rel_error)),
    h('td', { class: 'n', dataset: { value: r.ms, path: `steps.check.rows.${i}.ms` } }, fmtMs(r.ms)),
    h('td', { class: r.passed ? 'ok' : 'bad' }, r.passed ? 'pass' : 'fail')));
  const parts = [h('div', { class: 'scroll' }, table(['device', 'impl', 'kernel', 'max abs error', 'rel error', 'time', 'result'], rows, { id: 'check-table' }))];
  if (!check.rows.some((r) => r.device === 'cuda')) {
    parts.push(h('p', { class: 'note', id: 'check-gpu-note' }, machine && machine.gpu
      ? 'No GPU rows in this report.' : 'GPU kernels: not measured on this machine (no GPU).'));
  }
  out.replaceChildren(...parts);
}

export function renderKernel(sources, check, machine) {
  renderSources(sources);
  renderCheck(check, machine);
}
