// The report page: reads the report JSON and the kernels' source from the two inline JSON blocks
// and draws the five steps. Everything runs from file:// with no network.
import { $, h, notMeasured } from './dom.js';
import { renderHeader } from './header.js';
import { renderMemory } from './memory.js';
import { renderSoftmax } from './softmax.js';
import { renderBlocking } from './blocking.js';
import { renderKernel } from './kernel.js';
import { renderMeasured } from './measured.js';
import { renderFp8 } from './fp8.js';
import { renderTraining } from './training.js';

function readJson(id) {
  return JSON.parse($(id).textContent);
}

function main() {
  const doc = readJson('flashbox-data');
  const sources = readJson('flashbox-sources');
  if (doc.schema_version !== 1) {
    throw new Error(`report schema_version ${doc.schema_version} is not supported by this page (expected 1)`);
  }
  const steps = doc.steps || {};
  const sections = [
    ['header', () => renderHeader(doc)],
    ['step-memory', () => renderMemory(steps.memory, steps.bench, steps.peers)],
    ['step-softmax', () => renderSoftmax(steps.softmax_trace)],
    ['step-blocking', () => renderBlocking(steps.blocking)],
    ['step-kernel', () => renderKernel(sources, steps.check, doc.machine)],
    ['step-measured', () => renderMeasured(doc)],
    ['fp8-body', () => renderFp8(steps.fp8)],
    ['training-body', () => renderTraining($('training-body'), steps.gpt2_training, steps.gpt2)],
  ];
  for (const [id, render] of sections) {
    try {
      render();
    } catch (err) {
      // One broken section must not blank the page; the error still reaches the console.
      console.error(`flashbox page: section ${id} failed:`, err);
      const target = id === 'header' ? document.querySelector('header') : $(id);
      target.append(h('div', { class: 'not-measured error' }, `This section could not be drawn: ${err.message}`));
    }
  }
  document.body.dataset.ready = 'true';
}

main();
