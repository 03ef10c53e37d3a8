/*
 * A chat's trust timeline (templates/workspace/trust.html): the header's "Careful: …"
 * badge opens it, as a menu (<details class="menu">: Enter or Space opens it, Escape
 * closes it, conch-keys.js).
 *
 * - A link to a rise (#rise-…: an ask's "Why it is careful", a refused step's or a card's
 *   "When they came in", another chat's page opened at one) needs nothing here: the
 *   browser opens the <details> a fragment is in, and focuses the rise (tabindex=-1).
 * - A rise's own link to its step or its message's card closes the timeline, which
 *   would cover it, and goes there, opening the earlier version of a reply that holds it.
 * - The header is swapped in again at each push: a timeline the person opened stays
 *   open, as every open menu with an id does (conch-keys.js).
 *
 * No inline script, no eval: the page's Content-Security-Policy forbids both.
 */
(function () {
  'use strict';

  var body = document.body;
  var MENU = 'trust-menu';

  function goTo(target) {
    for (var node = target; node; node = node.parentElement) {
      if (node.tagName === 'DETAILS') { node.open = true; }
    }
    if (!target.hasAttribute('tabindex')) { target.setAttribute('tabindex', '-1'); }
    target.scrollIntoView({ block: 'nearest' });
    target.focus({ preventScroll: true });
  }

  body.addEventListener('click', function (evt) {
    var link = evt.target && evt.target.closest ? evt.target.closest('a[data-trust-goes]') : null;
    var target = link ? document.getElementById((link.getAttribute('href') || '').slice(1)) : null;
    if (!target) { return; }
    evt.preventDefault();
    var menu = document.getElementById(MENU);
    if (menu) { menu.open = false; }
    goTo(target);
  });
})();
