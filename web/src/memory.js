// Step 1: the size of S, P and Q+K+V+O for a chosen T, and the measured extra memory near that T.
import { $, h, notMeasured, setVal } from './dom.js';
import { fmtBytes, fmtInt, fmtNum } from './format.js';
import { benchSeries, nearestRow, peerSeries } from './series.js';

const DTYPE_BYTES = { bf16: 2, fp16: 2, fp32: 4 };

// The arithmetic of src/report/memory_arith.cpp; the JSON's own row is used when T was one of them.
export function memoryAt(config, rows, t) {
  const row = (rows || []).find((r) => r.seqlen === t);
  if (row) return { ...row, from: 'json' };
  const e = DTYPE_BYTES[config.dtype];
  if (!e) throw new Error(`unknown dtype ${config.dtype}`);
  const s = config.batch * config.heads * t * t * e;
  return { seqlen: t, s_bytes: s, p_bytes: s, qkvo_bytes: 4 * config.batch * config.heads * t * config.head_dim * e,
    s_over_qkvo: t / (4 * config.head_dim), from: 'formula' };
}

// The three cards of the source page: naive, flash and SDPA, each the series measured on this machine
// (the GPU's when there is one, else the CPU levels and SDPA on the CPU).
function cardSeries(series, peer) {
  const find = (list, ...keys) => keys.map((k) => list.find((s) => s.key === k)).find(Boolean);
  return {
    naive: find(series, 'naive|cuda|forward', 'naive|cpu|forward'),
    flash: find(series, 'flash|cuda|forward', 'blocked|cpu|forward'),
    sdpa: find(peer, 'peer|sdpa_flash|forward', 'peer|sdpa_math|forward') ||
      peer.find((s) => s.impl.startsWith('sdpa_')),
  };
}

function extraValue(row, note) {
  if (row.status === 'oom') return ['oom', 'out of memory'];
  if (row.status !== 'ok') return ['null', row.status];
  if (row.extra_bytes === null || row.extra_bytes === undefined) return ['null', note || 'not measured'];
  return [row.extra_bytes, fmtBytes(row.extra_bytes)];
}

function updateCard(name, s, t, why) {
  const big = $(`mem-${name}`);
  const at = $(`mem-${name}-at`);
  const card = $(`mem-card-${name}`);
  if (!s) {
    setVal(big, null, '–');
    at.textContent = `not measured on this machine${why ? `: ${why}` : ''}`;
    card.dataset.series = '';
    return;
  }
  const row = nearestRow(s.rows, t);
  const [value, text] = extraValue(row, row.extra_bytes_note ? 'not measured' : '');
  setVal(big, value, text);
  big.classList.toggle('oom', value === 'oom');
  card.dataset.series = s.key;
  card.dataset.seqlen = row.seqlen;
  at.textContent = `${s.label}${row.kernel ? ` (${row.kernel})` : ''}, measured at T = ${fmtInt(row.seqlen)}` +
    (row.extra_bytes_note ? `; ${row.extra_bytes_note}` : '');
}

export function renderMemory(memory, bench, peers) {
  const body = $('mem-body');
  if (!memory || !memory.measured) {
    body.replaceChildren(notMeasured(memory ? memory.reason : 'the report has no memory step'));
    return;
  }
  const c = memory.config;
  $('mem-config').textContent = `batch ${c.batch}, ${c.heads} heads, head_dim ${c.head_dim}, ${c.dtype}`;
  const series = benchSeries(bench).filter((s) => s.direction === 'forward');
  const peer = peerSeries(peers, bench && bench.config).series.filter((s) => s.direction === 'forward');
  const slider = $('t-slider');
  if (memory.example_seqlen) slider.value = String(memory.example_seqlen);

  function update() {
    const t = Number(slider.value);
    const r = memoryAt(c, memory.rows, t);
    setVal($('t-value'), t, fmtInt(t));
    setVal($('s-bytes'), r.s_bytes, fmtBytes(r.s_bytes));
    setVal($('p-bytes'), r.p_bytes, fmtBytes(r.p_bytes));
    setVal($('qkvo-bytes'), r.qkvo_bytes, fmtBytes(r.qkvo_bytes));
    setVal($('s-ratio'), r.s_over_qkvo, `${fmtNum(r.s_over_qkvo)}×`);
    $('s-bytes').dataset.from = r.from;

    const out = $('mem-measured');
    const cards = cardSeries(series, peer);
    const benchWhy = bench ? bench.reason : 'the report has no bench step';
    updateCard('naive', cards.naive, t, benchWhy);
    updateCard('flash', cards.flash, t, benchWhy);
    updateCard('sdpa', cards.sdpa, t, peers && !peers.measured ? peers.reason : (bench && bench.measured ? '' : benchWhy));
    if (!bench || !bench.measured) {
      out.replaceChildren(notMeasured(benchWhy));
    } else {
      const items = [...series, ...peer].map((s) => {
        const row = nearestRow(s.rows, t);
        const [v, text] = extraValue(row);
        const value = h('b', { class: v === 'oom' ? 'oom' : undefined, dataset: { value: v }, title: row.error || '' }, text);
        return h('li', { dataset: { series: s.key, seqlen: row.seqlen } }, h('span', { class: 'who' }, s.label), ' ',
          value, h('span', { class: 'at' }, ` at T = ${fmtInt(row.seqlen)}${row.kernel ? ` (${row.kernel})` : ''}`));
      });
      const notes = [];
      const bc = bench.config;
      if (bc && (bc.batch !== c.batch || bc.heads !== c.heads || bc.head_dim !== c.head_dim)) {
        notes.push(h('p', { class: 'note' }, `Measured with batch ${bc.batch}, ${bc.heads} heads, head_dim ${bc.head_dim}.`));
      }
      if (!peer.length) {
        notes.push(h('p', { class: 'note', id: 'mem-peers-note' },
          `PyTorch SDPA: not measured on this machine${peers && peers.reason ? ` (${peers.reason})` : ''}.`));
      }
      out.replaceChildren(h('ul', { class: 'measured-list' }, items), ...notes);
    }
  }
  slider.addEventListener('input', update);
  update();
}
