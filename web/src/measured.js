// Step 5: measured time and extra memory against T (Chart.js), the GPT-2 loss table and the pass
// criteria.
import {
  CategoryScale, Chart, Legend, LineController, LineElement, LogarithmicScale, PointElement, Tooltip,
} from 'chart.js';
import { $, h, notMeasured, table } from './dom.js';
import { fmtBytes, fmtInt, fmtMs, fmtNum } from './format.js';
import { benchSeries, peerSeries } from './series.js';

Chart.register(CategoryScale, LogarithmicScale, LineController, LineElement, PointElement, Legend, Tooltip);

const PALETTE = ['#d62828', '#1d6fb8', '#2a9d8f', '#7b2cbf', '#e76f51', '#6a994e', '#8d6e63', '#0096c7', '#b5179e', '#555'];
// Log-axis labels only at 1, 2 and 5 times a power of ten, so they never overlap.
function isMajorLogTick(v) {
  if (!(v > 0)) return false;
  const m = v / 10 ** Math.floor(Math.log10(v) + 1e-9);
  return [1, 2, 5].some((x) => Math.abs(m - x) < 1e-6);
}

const METRICS = {
  time: { field: 'ms', axis: 'time per call (ms, log scale)', fmt: fmtMs },
  memory: { field: 'extra_bytes', axis: 'extra memory (log scale)', fmt: fmtBytes },
};

function renderChart(series, bench, peersInfo) {
  const directions = ['forward', 'backward'].filter((d) => series.some((s) => s.direction === d));
  // The switch shows only when there is a backward to switch to.
  $('chart-direction-group').hidden = directions.length < 2;
  const state = { metric: 'time', direction: directions[0] || 'forward' };
  // One colour per implementation whichever direction is shown.
  const identities = [...new Set(series.map((s) => s.key.replace(/\|(forward|backward)$/, '')))];
  const colorOf = (s) => PALETTE[identities.indexOf(s.key.replace(/\|(forward|backward)$/, '')) % PALETTE.length];
  const ctx = $('bench-chart');
  const chart = new Chart(ctx, {
    type: 'line',
    data: { labels: [], datasets: [] },
    options: {
      animation: false,
      responsive: true,
      maintainAspectRatio: false,
      interaction: { mode: 'nearest', intersect: false },
      scales: {
        x: { type: 'category', title: { display: true, text: 'T (sequence length)' } },
        y: { type: 'logarithmic', title: { display: true, text: '' },
          ticks: { callback: (v) => (isMajorLogTick(v) ? (state.metric === 'memory' ? fmtBytes(v) : fmtNum(v)) : '') } },
      },
      plugins: {
        legend: { position: 'bottom', labels: { boxWidth: 12, usePointStyle: true } },
        tooltip: {
          callbacks: {
            label: (item) => {
              const ds = item.dataset;
              if (ds.oom) return `${ds.oomLabels[item.dataIndex]}: out of memory`;
              const kernel = ds.kernels[item.dataIndex];
              return `${ds.label}: ${METRICS[state.metric].fmt(item.parsed.y)}${kernel ? ` (kernel ${kernel})` : ''}`;
            },
          },
        },
      },
    },
  });
  window.__flashbox = { chart };

  function update() {
    const metric = METRICS[state.metric];
    const shown = series.filter((s) => s.direction === state.direction);
    const labels = [...new Set(shown.flatMap((s) => s.rows.map((r) => r.seqlen)))].sort((a, b) => a - b);
    let top = 0;
    const datasets = shown.map((s) => {
      const color = colorOf(s);
      const data = labels.map((t) => {
        const r = s.rows.find((x) => x.seqlen === t);
        const y = r && r.status === 'ok' ? r[metric.field] : null;
        if (y !== null && y !== undefined && y > top) top = y;
        return y === undefined ? null : y;
      });
      const kernels = labels.map((t) => (s.rows.find((x) => x.seqlen === t) || {}).kernel || '');
      return { label: s.label, key: s.key, data, kernels, borderColor: color, backgroundColor: color,
        borderDash: s.source === 'peer' ? [6, 4] : [], pointRadius: 3, spanGaps: false, tension: 0 };
    });
    const oomLabels = labels.map((t) => shown.filter((s) => s.rows.some((r) => r.seqlen === t && r.status === 'oom'))
      .map((s) => s.label).join(', '));
    if (oomLabels.some((x) => x)) {
      datasets.push({ label: 'out of memory', oom: true, oomLabels, showLine: false,
        data: oomLabels.map((x) => (x ? top * 1.6 || 1 : null)), pointStyle: 'crossRot', pointRadius: 9,
        pointBorderWidth: 3, borderColor: '#d00000', backgroundColor: '#d00000' });
    }
    chart.data.labels = labels.map(fmtInt);
    chart.data.datasets = datasets;
    chart.options.scales.y.title.text = metric.axis;
    chart.update();
    $('chart-time').setAttribute('aria-pressed', String(state.metric === 'time'));
    $('chart-memory').setAttribute('aria-pressed', String(state.metric === 'memory'));
    $('chart-forward').setAttribute('aria-pressed', String(state.direction === 'forward'));
    $('chart-backward').setAttribute('aria-pressed', String(state.direction === 'backward'));
    const chartBox = ctx.parentElement;
    chartBox.dataset.metric = state.metric;
    chartBox.dataset.direction = state.direction;
    const notes = [];
    if (oomLabels.some((x) => x)) notes.push('× marks an out-of-memory failure at that T.');
    const kernelChanges = shown.filter((s) => s.kernels && s.kernels.length > 1);
    if (kernelChanges.length) {
      notes.push(kernelChanges.map((s) => `${s.label} runs ${s.kernels.join(', ')} (the library picks by T; ` +
        'the tooltip and the table name each point\'s kernel).').join(' '));
    }
    if (!peersInfo.series.length) notes.push(`PyTorch SDPA: not measured on this machine${peersInfo.reason ? ` (${peersInfo.reason})` : ''}.`);
    else if (peersInfo.sameMethod) notes.push(`Dashed lines: PyTorch SDPA (torch ${peersInfo.torch || '?'}), timed by this report with the same method as flashbox.`);
    else notes.push('Dashed lines: PyTorch SDPA and flashbox through PyTorch, measured in the same run.');
    if (peersInfo.filtered) notes.push(`${peersInfo.filtered} peer rows with other shapes are listed in the table only.`);
    $('chart-note').textContent = notes.join(' ');
  }

  $('chart-time').addEventListener('click', () => { state.metric = 'time'; update(); });
  $('chart-memory').addEventListener('click', () => { state.metric = 'memory'; update(); });
  $('chart-forward').addEventListener('click', () => { state.direction = 'forward'; update(); });
  $('chart-backward').addEventListener('click', () => { state.direction = 'backward'; update(); });
  update();
}

function benchTable(bench, peers) {
  const rows = [];
  const cell = (v, path, fmt) => h('td', { class: 'n', dataset: { value: v === undefined ? 'null' : v, path } }, fmt(v));
  const status = (s, err) => h('td', { class: s === 'ok' ? 'ok' : 'bad', title: err || '' },
    s === 'oom' ? 'out of memory' : s === 'error' ? `error${err ? `: ${err}` : ''}` : s);
  (bench.rows || []).forEach((r, i) => {
    const p = `steps.bench.rows.${i}`;
    rows.push(h('tr', { dataset: { path: p } }, h('td', {}, 'flashbox'), h('td', {}, `${r.impl} · ${r.device}`),
      h('td', {}, h('code', {}, r.kernel)), h('td', {}, r.direction),
      cell(r.seqlen, `${p}.seqlen`, fmtInt), cell(r.ms, `${p}.ms`, fmtMs), cell(r.tflops, `${p}.tflops`, fmtNum),
      cell(r.extra_bytes, `${p}.extra_bytes`, fmtBytes), status(r.status, r.error)));
  });
  if (peers && peers.measured) {
    (peers.rows || []).forEach((r, i) => {
      const p = `steps.peers.rows.${i}`;
      rows.push(h('tr', { class: 'peer', dataset: { path: p } }, h('td', {}, r.impl.startsWith('flashbox') ? 'flashbox via PyTorch' : 'PyTorch'),
        h('td', {}, `${r.impl}${r.device ? ` · ${r.device}` : ''}`),
        h('td', {}, `d=${r.head_dim}, ${r.heads} heads, batch ${r.batch}${r.causal ? ', causal' : ''}${r.kernel ? `; ${r.kernel}` : ''}`), h('td', {}, r.direction),
        cell(r.seqlen, `${p}.seqlen`, fmtInt), cell(r.ms, `${p}.ms`, fmtMs), cell(r.tflops, `${p}.tflops`, fmtNum),
        cell(r.extra_bytes, `${p}.extra_bytes`, fmtBytes), status(r.status || 'ok', r.error)));
    });
  }
  return table(['source', 'impl', 'kernel / shape', 'direction', 'T', 'time', 'TFLOP/s', 'extra memory', 'status'], rows,
    { id: 'bench-table-el' });
}

function renderGpt2(gpt2) {
  const out = $('gpt2-body');
  if (!gpt2 || !gpt2.measured) {
    out.replaceChildren(notMeasured(gpt2 ? gpt2.reason : 'the report has no gpt2 step'));
    return;
  }
  let config = `The same weights (${gpt2.weights}, config ${gpt2.config}) on the same ` +
    `${fmtInt(gpt2.tokens)} tokens, sequence length ${fmtInt(gpt2.seqlen)}; only the attention function changes.`;
  if (gpt2.cpu_tokens) config += ` The CPU rows use the first ${fmtInt(gpt2.cpu_tokens)} of them.`;
  const t = gpt2.trained;
  if (t) {
    const val = t.validation ? `, validation loss ${Number(t.validation.loss).toFixed(4)} on ` +
      `${fmtInt(t.validation.tokens)} held-out tokens` : '';
    config += ` This model was trained from scratch by ${t.trained_by} (${t.device}) on ${t.data}: ` +
      `${fmtInt(t.tokens)} tokens in ${fmtInt(t.steps)} steps of ${fmtInt(t.tokens_per_step)}${val}.`;
  }
  $('gpt2-config').textContent = config;
  const rows = gpt2.rows.map((r, i) => {
    const p = `steps.gpt2.rows.${i}`;
    return h('tr', {}, h('td', {}, r.impl), h('td', {}, r.tokens ? `${r.device} (${fmtInt(r.tokens)} tokens)` : r.device),
      h('td', { class: 'n', dataset: { value: r.loss, path: `${p}.loss` } }, r.loss.toFixed(5)),
      h('td', { class: 'n', dataset: { value: r.diff_from_naive, path: `${p}.diff_from_naive` } },
        r.diff_from_naive === 0 ? '0' : r.diff_from_naive.toExponential(1)),
      h('td', { class: 'n', dataset: { value: r.seconds, path: `${p}.seconds` } }, `${fmtNum(r.seconds)} s`),
      h('td', { class: 'n', dataset: { value: r.tokens_per_second, path: `${p}.tokens_per_second` } }, fmtInt(Math.round(r.tokens_per_second))));
  });
  out.replaceChildren(h('div', { class: 'scroll' },
    table(['attention', 'device', 'loss', 'loss − naive', 'time', 'tokens/s'], rows, { id: 'gpt2-table' })));
}

function renderCriteria(criteria) {
  const out = $('criteria');
  if (!Array.isArray(criteria) || !criteria.length) {
    out.replaceChildren(notMeasured('the report lists no criteria'));
    return;
  }
  const label = { pass: 'pass', fail: 'fail', not_measured: 'not measured' };
  const items = criteria.map((c, i) => h('li', { class: `crit ${c.status}`, dataset: { index: i, status: c.status } },
    h('span', { class: 'badge' }, label[c.status] || c.status),
    h('span', { class: 'name' }, c.name),
    h('span', { class: 'measured' }, 'measured ', h('b', { dataset: { value: c.value === null ? 'null' : c.value } },
      c.value === null || c.value === undefined ? '—' : String(c.value))),
    h('span', { class: 'threshold' }, `needs ${c.threshold}`)));
  const count = (s) => criteria.filter((c) => c.status === s).length;
  out.replaceChildren(h('p', { class: 'summary', id: 'criteria-summary' },
    `${count('pass')} pass · ${count('fail')} fail · ${count('not_measured')} not measured on this machine`),
  h('ul', { class: 'criteria' }, items));
}

export function renderMeasured(doc) {
  const steps = doc.steps || {};
  const bench = steps.bench;
  const body = $('bench-body');
  if (!bench || !bench.measured) {
    body.replaceChildren(notMeasured(bench ? bench.reason : 'the report has no bench step'));
  } else {
    const c = bench.config;
    $('bench-config').textContent = `${bench.device === 'cuda' ? 'GPU' : 'CPU'} timings: batch ${c.batch}, ${c.heads} heads, ` +
      `head_dim ${c.head_dim}, ${c.dtype}, ${c.causal ? 'causal ' : ''}attention, median of ${c.repeats} calls` +
      `${c.warmup !== undefined ? ` after ${c.warmup} warm-up call${c.warmup === 1 ? '' : 's'}` : ''}. ` +
      `"Out of memory" means that implementation failed to allocate at that T on this machine.` +
      (doc.machine && !doc.machine.gpu ? ' GPU rows: not measured on this machine (no GPU).' : '');
    const peers = peerSeries(steps.peers, c);
    const p = steps.peers || {};
    renderChart([...benchSeries(bench), ...peers.series], bench,
      { series: peers.series, filtered: peers.filtered, reason: p.reason, sameMethod: Boolean(p.same_method_as_bench), torch: p.torch });
    $('bench-table').replaceChildren(benchTable(bench, steps.peers));
  }
  renderGpt2(steps.gpt2);
  renderCriteria(doc.criteria);
}
