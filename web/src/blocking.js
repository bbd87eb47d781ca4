// Step 3: one Q block's scan over the BLOCK_M x BLOCK_N grid, step by step or played.
import { $, h, notMeasured, setVal } from './dom.js';
import { fmtInt, fmtNum } from './format.js';

// Cell (i, j) under a causal mask with seqlen_q = seqlen_k = t: 'skip' when every key is after every
// query of the block, 'diag' when the diagonal crosses it, 'full' otherwise.
export function cellKind(i, j, bm, bn, t, causal) {
  if (!causal) return 'full';
  const lastRow = Math.min(t, (i + 1) * bm) - 1;
  const firstCol = j * bn;
  const lastCol = Math.min(t, (j + 1) * bn) - 1;
  if (firstCol > lastRow) return 'skip';
  if (lastCol > i * bm) return 'diag';
  return 'full';
}

const COLORS = {
  other: { full: '#dce6f4', diag: '#f7e7b0', skip: '#f0f0f0' },
  row: { todo: '#9fbbe6', diag: '#f2c94c', skip: '#c9c9c9', done: '#3f9d5a', current: '#ff7a00' },
};

export function renderBlocking(blk) {
  const body = $('grid-body');
  if (!blk || !blk.measured) {
    body.replaceChildren(notMeasured(blk ? blk.reason : 'the report has no blocking step'));
    return;
  }
  const bm = blk.block_m;
  const bn = blk.block_n;
  const bh = blk.batch * blk.heads;
  const tSelect = $('grid-t');
  const qInput = $('grid-q');
  const causalBox = $('grid-causal');
  const canvas = $('grid-canvas');
  const playBtn = $('grid-play');
  const stepBtn = $('grid-step');
  const ts = new Set([512, 1024, 2048, 4096, 8192, 16384, blk.example_seqlen]);
  for (const t of [...ts].sort((a, b) => a - b)) tSelect.append(h('option', { value: t }, fmtInt(t)));
  tSelect.value = String(blk.example_seqlen);
  if (blk.cpu_blocked_vs_naive_max_abs !== undefined) {
    $('grid-check').replaceChildren('The CPU blocked implementation against the naive one, max absolute difference: ',
      h('b', { id: 'grid-cpu-diff', dataset: { value: blk.cpu_blocked_vs_naive_max_abs } }, fmtNum(blk.cpu_blocked_vs_naive_max_abs)));
  }

  const st = { t: blk.example_seqlen, qi: 0, causal: true, pos: 0, timer: null };
  const nq = () => Math.ceil(st.t / bm);
  const nk = () => Math.ceil(st.t / bn);
  const visits = () => {
    const v = [];
    for (let j = 0; j < nk(); j += 1) if (cellKind(st.qi, j, bm, bn, st.t, st.causal) !== 'skip') v.push(j);
    return v;
  };

  function stop() {
    if (st.timer) clearInterval(st.timer);
    st.timer = null;
    playBtn.textContent = 'Play';
    playBtn.setAttribute('aria-pressed', 'false');
  }

  function draw(visit, current, done) {
    const cssWidth = Math.max(160, Math.min(480, canvas.parentElement.clientWidth || 480));
    const dpr = window.devicePixelRatio || 1;
    canvas.style.width = `${cssWidth}px`;
    canvas.style.height = `${cssWidth}px`;
    canvas.width = Math.round(cssWidth * dpr);
    canvas.height = Math.round(cssWidth * dpr);
    const ctx = canvas.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, cssWidth, cssWidth);
    const rows = nq();
    const cols = nk();
    const cw = cssWidth / cols;
    const ch = cssWidth / rows;
    const gap = Math.min(cw, ch) >= 6 ? 1 : 0;
    const doneSet = new Set(visit.slice(0, done));
    for (let i = 0; i < rows; i += 1) {
      for (let j = 0; j < cols; j += 1) {
        const kind = cellKind(i, j, bm, bn, st.t, st.causal);
        let color;
        if (i !== st.qi) color = COLORS.other[kind];
        else if (j === current) color = COLORS.row.current;
        else if (doneSet.has(j)) color = COLORS.row.done;
        else color = kind === 'skip' ? COLORS.row.skip : kind === 'diag' ? COLORS.row.diag : COLORS.row.todo;
        ctx.fillStyle = color;
        ctx.fillRect(j * cw, i * ch, cw - gap, ch - gap);
      }
    }
    ctx.strokeStyle = '#1d3557';
    ctx.lineWidth = 2;
    ctx.strokeRect(1, st.qi * ch + 1, cssWidth - 2, Math.max(ch - 2, 1));
  }

  function update() {
    const rows = nq();
    qInput.max = String(rows - 1);
    if (st.qi > rows - 1) st.qi = rows - 1;
    qInput.value = String(st.qi);
    $('grid-q-value').textContent = `${st.qi} of ${rows}`;
    const visit = visits();
    const total = visit.length + 2;  // load Q, one per cell, write O
    st.pos = Math.min(st.pos, total);
    const k = st.pos - 1;  // index of the cell being computed when 1 <= st.pos - 1 <= visit.length
    const current = k >= 1 && k <= visit.length ? visit[k - 1] : null;
    const done = st.pos >= total ? visit.length : Math.max(0, k - 1);
    let diag = 0;
    let skipped = 0;
    for (let j = 0; j < nk(); j += 1) {
      const kind = cellKind(st.qi, j, bm, bn, st.t, st.causal);
      if (kind === 'diag') diag += 1;
      if (kind === 'skip') skipped += 1;
    }
    setVal($('grid-done'), done, `${fmtInt(done)} / ${fmtInt(visit.length)}`);
    setVal($('grid-diag'), diag, fmtInt(diag));
    setVal($('grid-skipped'), skipped, fmtInt(skipped));
    $('grid-size').textContent = `(${fmtInt(rows)}, ${fmtInt(bh)})`;
    $('grid-size').dataset.value = JSON.stringify([rows, bh]);
    setVal($('grid-programs'), rows * bh, fmtInt(rows * bh));

    const q0 = st.qi * bm;
    const q1 = Math.min(st.t, q0 + bm) - 1;
    let status;
    if (st.pos === 0) status = `Program for Q block ${st.qi} (rows ${q0}–${q1}) has not started. Press "Next cell".`;
    else if (st.pos === 1) status = `Load Q block ${st.qi} (rows ${q0}–${q1}) into SRAM; m = −∞, l = 0, acc = 0.`;
    else if (current !== null) {
      const kind = cellKind(st.qi, current, bm, bn, st.t, st.causal);
      const k0 = current * bn;
      const k1 = Math.min(st.t, k0 + bn) - 1;
      status = `Cell (${st.qi}, ${current}): load K/V block ${current} (keys ${k0}–${k1}), S tile = Q·Kᵀ on-chip` +
        `${kind === 'diag' ? ', mask element-wise (diagonal cell)' : ''}, update m, l, acc.`;
    } else status = `Done: acc / l, write O block ${st.qi} and its logsumexp to HBM. ${fmtInt(skipped)} cells skipped.`;
    const statusEl = $('grid-status');
    statusEl.textContent = status;
    statusEl.dataset.pos = String(st.pos);
    statusEl.dataset.current = current === null ? '' : String(current);

    const sram = [];
    if (st.pos >= 1 && st.pos < total) {
      sram.push(`Q block ${st.qi}: ${bm} × d`, 'm, l: one per query row', `acc: ${bm} × d, fp32`);
      if (current !== null) sram.push(`K, V block ${current}: ${bn} × d each`, `S tile: ${bm} × ${bn}, fp32`);
    } else if (st.pos === 0) sram.push('(empty)');
    else sram.push('(released)');
    $('grid-sram').replaceChildren(...sram.map((x) => h('li', {}, x)));
    const hbm = [`Q, K, V: ${fmtInt(st.t)} × d each`,
      st.pos >= total ? `O: block ${st.qi} written, plus its logsumexp` : `O: block ${st.qi} not written yet`,
      'S, P: never stored'];
    $('grid-hbm').replaceChildren(...hbm.map((x) => h('li', {}, x)));
    stepBtn.disabled = st.pos >= total;
    draw(visit, current, done);
    return st.pos >= total;
  }

  function reset() {
    stop();
    st.pos = 0;
    update();
  }

  stepBtn.addEventListener('click', () => {
    st.pos += 1;
    if (update()) stop();
  });
  playBtn.addEventListener('click', () => {
    if (st.timer) {
      stop();
      return;
    }
    if (st.pos >= visits().length + 2) st.pos = 0;
    const interval = Math.max(25, Math.min(400, 6000 / (visits().length + 2)));
    playBtn.textContent = 'Pause';
    playBtn.setAttribute('aria-pressed', 'true');
    st.timer = setInterval(() => {
      st.pos += 1;
      if (update()) stop();
    }, interval);
  });
  $('grid-reset').addEventListener('click', reset);
  tSelect.addEventListener('change', () => {
    st.t = Number(tSelect.value);
    reset();
  });
  qInput.addEventListener('input', () => {
    st.qi = Number(qInput.value);
    reset();
  });
  causalBox.addEventListener('change', () => {
    st.causal = causalBox.checked;
    reset();
  });
  canvas.addEventListener('click', (ev) => {
    const rect = canvas.getBoundingClientRect();
    st.qi = Math.min(nq() - 1, Math.max(0, Math.floor(((ev.clientY - rect.top) / rect.height) * nq())));
    reset();
  });
  window.addEventListener('resize', () => update());
  update();
}
