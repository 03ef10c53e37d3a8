/*
 * Code blocks in a reply: each gets a bar with its language
 * (the data-lang the server wrote) and a Copy button that copies the code as text.
 *
 * - The bar is added here, not by the server: a reply's HTML is cleaned to a short
 *   list of tags (chats/markdown.py), and a <button> is never one of them.
 * - Blocks swapped in later (a push, a live reply) get their bar too (htmx:load).
 * - Copy says "Copied" for a moment, or "Copy failed" where the browser refuses.
 * - A reply's own Copy button (data-copy) copies the whole reply as Markdown.
 * - A code block or a table wider than the column scrolls in its own box (a phone's
 *   page never scrolls sideways): such a box takes the focus (tabindex 0), so the
 *   arrow keys can scroll it too. Asked again when the window changes size.
 *
 * No inline script, no eval: the page's Content-Security-Policy forbids both.
 */
(function () {
  'use strict';

  function barFor(pre) {
    if (pre.previousElementSibling && pre.previousElementSibling.classList.contains('code-bar')) { return; }
    var code = pre.querySelector('code');
    var bar = document.createElement('div');
    bar.className = 'code-bar';
    var lang = document.createElement('span');
    lang.className = 'code-lang';
    lang.textContent = (code && code.getAttribute('data-lang')) || 'text';
    var copy = document.createElement('button');
    copy.type = 'button';
    copy.className = 'code-copy small';
    copy.textContent = 'Copy';
    copy.setAttribute('aria-label', 'Copy the ' + lang.textContent + ' code');
    bar.appendChild(lang);
    bar.appendChild(copy);
    pre.parentNode.insertBefore(bar, pre);
  }

  function barsIn(root) {
    if (!root || !root.querySelectorAll) { return; }
    if (root.matches && root.matches('.md pre.code')) { barFor(root); }
    root.querySelectorAll('.md pre.code').forEach(barFor);
  }

  var WIDE = '.md pre.code, .md table';

  function scrollersIn(root) {
    if (!root || !root.querySelectorAll) { return; }
    var boxes = Array.prototype.slice.call(root.querySelectorAll(WIDE));
    if (root.matches && root.matches(WIDE)) { boxes.push(root); }
    boxes.forEach(function (box) {
      if (box.scrollWidth > box.clientWidth) {
        box.tabIndex = 0;
      } else {
        box.removeAttribute('tabindex');
      }
    });
  }

  function decorate(root) {
    barsIn(root);
    scrollersIn(root);
  }

  document.body.addEventListener('htmx:load', function (evt) { decorate(evt.target); });
  document.body.addEventListener('htmx:oobAfterSwap', function (evt) { decorate(evt.detail.target); });
  decorate(document.body);

  var resizing = null;
  window.addEventListener('resize', function () {
    window.clearTimeout(resizing);
    resizing = window.setTimeout(function () { scrollersIn(document.body); }, 150);
  });

  // A code block's Copy copies its code; a reply's Copy (data-copy, the server's copy
  // of the reply as the model wrote it) copies the reply as Markdown.
  document.body.addEventListener('click', function (evt) {
    var button = evt.target && evt.target.closest ? evt.target.closest('button.code-copy, button[data-copy]') : null;
    if (!button) { return; }
    var text;
    if (button.hasAttribute('data-copy')) {
      text = button.getAttribute('data-copy');
    } else {
      var pre = button.parentNode.nextElementSibling;
      text = pre ? pre.textContent : '';
    }
    function said(words) {
      button.textContent = words;
      window.setTimeout(function () { button.textContent = 'Copy'; }, 1500);
    }
    if (!navigator.clipboard) { said('Copy failed'); return; }
    navigator.clipboard.writeText(text).then(function () { said('Copied'); }, function () { said('Copy failed'); });
  });
})();
