// Step 5's FP8 rows: flashbox's e4m3 forward beside its bf16 forward on the same values (steps.fp8,
// measured only on a Hopper GPU), as TFLOP/s (the time per call in the cell's tooltip), the ratio FP8 / bf16 and each one's error against the
// fp64 reference; one line says where FP8 paid on this machine. Without the step: the reason, no rows.
import { $, h, notMeasured, table } from './dom.js';
import { fmtInt, fmtMs, fmtNum } from './format.js';

const shapeName = (r) => `D${r.head_dim} T${fmtInt(r.seqlen)} ${r.causal ? 'causal' : 'non-causal'}`;
const fmtRatio = (x) => `${x.toFixed(2)}×`;
const span = (xs, fmt) => {
  const lo = Math.min(...xs);
  const hi = Math.max(...xs);
  return lo === hi ? fmt(lo) : `${fmt(lo)}–${fmt(hi)}`;
};

// The one line on when FP8 pays, from the measured ratios and errors alone.
export function fp8Verdict(rows) {
  const both = rows.filter((r) => r.ratio !== null && r.ratio !== undefined);
  if (!both.length) return 'No shape ran both forwards here (the table gives each one\'s error), so nothing is said about when FP8 pays.';
  const paid = both.filter((r) => r.ratio >= 1);
  const slower = both.filter((r) => r.ratio < 1);
  const errors = (side) => both.map((r) => r[side].rel_error).filter((x) => x !== null && x !== undefined);
  const e8 = errors('fp8');
  const e16 = errors('bf16');
  const cost = e8.length && e16.length
    ? ` Its output error is ${span(e8, fmtNum)} against bf16's ${span(e16, fmtNum)} (P rounded to e4m3; docs/fp8.md).` : '';
  if (!slower.length) return `FP8 paid at every measured shape: ${span(both.map((r) => r.ratio), fmtRatio)} bf16's TFLOP/s.${cost}`;
  if (!paid.length) {
    return `FP8 did not pay at any measured shape here (${span(both.map((r) => r.ratio), fmtRatio)} bf16's TFLOP/s): use bf16.${cost}`;
  }
  return `FP8 paid at ${paid.map((r) => `${shapeName(r)} (${fmtRatio(r.ratio)})`).join(', ')}; at the other ` +
    `${slower.length} shape${slower.length === 1 ? '' : 's'} it was slower (${span(slower.map((r) => r.ratio), fmtRatio)}): use bf16 there.${cost}`;
}

function sideCells(side, p) {
  const cell = (v, key, fmt) => h('td', { class: 'n', dataset: { value: v === undefined ? 'null' : v, path: `${p}.${key}` } }, fmt(v));
  if (side.status !== 'ok') {
    const what = side.status === 'oom' ? 'out of memory' : `error${side.error ? `: ${side.error}` : ''}`;
    return [h('td', { class: 'bad', title: side.error || '', colspan: 2, dataset: { status: side.status } }, what)];
  }
  const tflops = cell(side.tflops, 'tflops', fmtNum);
  tflops.title = `${fmtMs(side.ms)} per call`;  // the time behind the rate (steps.fp8.rows.*.*.ms)
  return [tflops, cell(side.rel_error, 'rel_error', fmtNum)];
}

export function renderFp8(fp8) {
  const out = $('fp8-body');
  if (!fp8) {
    out.replaceChildren(notMeasured('the report has no fp8 step (written before the FP8 comparison existed)'));
    return;
  }
  if (!fp8.measured) {
    out.replaceChildren(notMeasured(fp8.reason));
    return;
  }
  const c = fp8.config;
  const config = h('p', { id: 'fp8-config' }, `${fp8.device}: FlashAttention-3's setup (batch × T = ${fmtInt(c.tokens)} ` +
    `tokens, heads × head_dim = ${fmtInt(c.width)}); ${c.dtype} q, k, v with one ${c.descale} descale ` +
    `(${c.descale_value}) and ${c.out_dtype} output, beside the bf16 forward on the same dequantized values; ` +
    `median of ${c.repeats} calls after ${c.warmup} warm-up call${c.warmup === 1 ? '' : 's'}. Error: ‖o − ref‖ / ‖ref‖ ` +
    `against fp64 attention on the dequantized inputs, over ${fmtInt(c.error_rows)} sampled query rows per shape.`);
  const rows = fp8.rows.map((r, i) => {
    const p = `steps.fp8.rows.${i}`;
    const ratio = r.ratio === null || r.ratio === undefined ? null : r.ratio;
    return h('tr', { dataset: { path: p } }, h('td', {}, `${r.head_dim}`), h('td', {}, r.causal ? 'causal' : 'non-causal'),
      h('td', { class: 'n', dataset: { value: r.seqlen, path: `${p}.seqlen` } }, fmtInt(r.seqlen)),
      h('td', { class: `n ratio ${ratio === null ? '' : ratio >= 1 ? 'ok' : 'bad'}`, dataset: { value: ratio === null ? 'null' : ratio, path: `${p}.ratio` } },
        ratio === null ? '–' : fmtRatio(ratio)),
      ...sideCells(r.bf16, `${p}.bf16`), ...sideCells(r.fp8, `${p}.fp8`),
      h('td', {}, h('code', {}, r.bf16.kernel || '–'), ' / ', h('code', {}, r.fp8.kernel || '–')));
  });
  out.replaceChildren(config,
    h('p', { class: 'note', id: 'fp8-verdict' }, fp8Verdict(fp8.rows)),
    h('div', { class: 'scroll' }, table(['head_dim', 'mask', 'T', 'FP8 / bf16', 'bf16 TFLOP/s',
      'bf16 error', 'FP8 TFLOP/s', 'FP8 error', 'kernels (bf16 / FP8)'], rows, { id: 'fp8-table' })));
}
