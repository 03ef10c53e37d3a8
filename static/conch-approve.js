/*
 * Keys for a request waiting for the person's OK.
 *
 * While a request is shown, A presses Approve, S "Approve, and don't ask again" (where it
 * is offered) and D Deny, with whatever reason is typed in its box. Each button carries
 * its key (data-key, shown on it in a <kbd>). Never while typing in a field, never with
 * Ctrl, Alt or Cmd, never on a key held down: a word typed in the message box is only words.
 * Escape in the message box, while a request is shown, leaves it for the request's keys.
 * After an answer the focus stays on the controls (#chat-controls, which a push keeps it on),
 * so the next request can be answered by its keys too.
 *
 * No inline script, no eval: the page's Content-Security-Policy forbids both.
 */
(function () {
  'use strict';

  function typing(target) {
    if (!target || !target.closest) { return false; }
    return !!target.closest('input, textarea, select, [contenteditable=""], [contenteditable="true"]');
  }

  function request() {
    return document.querySelector('#chat-controls .request');
  }

  document.body.addEventListener('keydown', function (evt) {
    if (evt.key !== 'Escape' || evt.defaultPrevented || evt.shiftKey || evt.ctrlKey || evt.metaKey || evt.altKey) { return; }
    var controls = document.getElementById('chat-controls');
    if (evt.target && evt.target.id === 'composer-text' && request() && controls) {
      evt.preventDefault();
      controls.focus();
    }
  });

  document.body.addEventListener('keydown', function (evt) {
    if (evt.defaultPrevented || evt.repeat || evt.ctrlKey || evt.metaKey || evt.altKey) { return; }
    if (typing(evt.target) || document.querySelector('dialog[open]')) { return; }
    var key = (evt.key || '').toLowerCase();
    if (key.length !== 1) { return; }
    var shown = request();
    if (!shown) { return; }
    var button = shown.querySelector('button[data-key="' + key + '"]');
    if (!button || button.disabled) { return; }
    evt.preventDefault();
    button.click();
  });
})();
