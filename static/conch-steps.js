/*
 * A reply's steps: each step that has something to show
 * is a <details>; its "± file" chips link to the change of that file.
 *
 * - A chip opens its step and goes to that file's change.
 * - The transcript is swapped in again at each event of a running reply: the
 *   steps the person opened stay open.
 *
 * No inline script, no eval: the page's Content-Security-Policy forbids both.
 */
(function () {
  'use strict';

  var body = document.body;
  var opened = {}; // ids of the <details> the person opened

  function openTo(target) {
    for (var node = target; node; node = node.parentElement) {
      if (node.tagName === 'DETAILS') { node.open = true; }
    }
  }

  body.addEventListener('click', function (evt) {
    var chip = evt.target && evt.target.closest ? evt.target.closest('a[data-opens-change]') : null;
    if (!chip) { return; }
    var id = (chip.getAttribute('href') || '').slice(1);
    var target = id ? document.getElementById(id) : null;
    if (!target) { return; }
    evt.preventDefault();
    openTo(target);
    target.scrollIntoView({ block: 'nearest' });
    target.focus({ preventScroll: true });
  });

  // "toggle" does not bubble: listen while it goes down.
  document.addEventListener('toggle', function (evt) {
    var details = evt.target;
    if (!details || details.tagName !== 'DETAILS' || !details.id || !details.closest('#transcript')) { return; }
    if (details.open) { opened[details.id] = true; } else { delete opened[details.id]; }
  }, true);

  body.addEventListener('htmx:oobAfterSwap', function (evt) {
    var target = evt.detail.target;
    if (!target || target.id !== 'transcript') { return; }
    Object.keys(opened).forEach(function (id) {
      var details = document.getElementById(id);
      if (details) { details.open = true; }
    });
  });
})();
