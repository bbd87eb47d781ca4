// Step 2: the online softmax trace, one block per click.
import { $, h, notMeasured, setVal } from './dom.js';
import { fmtInt, fmtNum, DASH } from './format.js';

export function renderSoftmax(trace) {
  const body = $('trace-body');
  if (!trace || !trace.measured) {
    body.replaceChildren(notMeasured(trace ? trace.reason : 'the report has no softmax_trace step'));
    return;
  }
  $('trace-block').textContent = String(trace.block);
  const cells = trace.values.map((x, i) => h('span', { class: 'cell', dataset: { index: i, value: x } }, fmtNum(x)));
  $('trace-values').replaceChildren(...cells);
  setVal($('trace-error'), trace.max_abs_error, fmtNum(trace.max_abs_error));
  const next = $('trace-next');
  let shown = 0;  // blocks read so far

  function update() {
    const step = shown > 0 ? trace.steps[shown - 1] : null;
    const read = step ? step.numbers_read : 0;
    cells.forEach((c, i) => {
      c.classList.toggle('read', i < read);
      c.classList.toggle('current', step !== null && i >= read - step.read.length && i < read);
    });
    if (step) {
      setVal($('trace-read'), step.numbers_read, `${fmtInt(step.numbers_read)} / ${trace.values.length}`);
      setVal($('trace-m'), step.m, fmtNum(step.m));
      setVal($('trace-l'), step.l, fmtNum(step.l));
      const first = step.block_index === 0 || step.m_old === null;
      setVal($('trace-rescale'), step.rescale, first ? `${fmtNum(step.rescale)} (first block: l was 0)` : fmtNum(step.rescale));
    } else {
      for (const id of ['trace-read', 'trace-m', 'trace-l', 'trace-rescale']) setVal($(id), null, DASH);
    }
    next.disabled = shown >= trace.steps.length;
    next.textContent = shown >= trace.steps.length ? 'All blocks read' : 'Read next block';
    const fin = $('trace-final');
    if (shown >= trace.steps.length) {
      const rows = trace.values.map((x, i) => h('tr', {},
        h('td', {}, fmtNum(x)),
        h('td', { dataset: { value: trace.softmax[i] } }, fmtNum(trace.softmax[i])),
        h('td', { dataset: { value: trace.exact_softmax[i] } }, fmtNum(trace.exact_softmax[i]))));
      fin.replaceChildren(h('table', { class: 'compact' },
        h('thead', {}, h('tr', {}, h('th', {}, 'x'), h('th', {}, 'online softmax'), h('th', {}, 'exact softmax'))),
        h('tbody', {}, rows)));
    } else {
      fin.replaceChildren();
    }
  }
  next.addEventListener('click', () => {
    if (shown < trace.steps.length) shown += 1;
    update();
  });
  $('trace-reset').addEventListener('click', () => {
    shown = 0;
    update();
  });
  update();
}
