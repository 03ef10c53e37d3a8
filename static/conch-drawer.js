/*
 * The chat list as a drawer, on a narrow screen.
 *
 * The top bar's button (aria-controls names the sidebar) opens and closes it;
 * conch.css shows the bar and makes the sidebar a drawer only on a narrow
 * screen, so on a wide one none of this is seen. Open, the drawer has the
 * focus (its first control), and the page under it is inert. It closes on
 * Escape and on a click outside it, giving the focus back to the button, and
 * when a chat or a search is chosen in it.
 *
 * Listened to on the body: a link that opens another chat in place swaps in
 * the whole page (hx-target="body"), button and drawer both, closed.
 *
 * No inline script, no eval: the page's Content-Security-Policy forbids both.
 */
(function () {
  'use strict';

  var body = document.body;
  var FOCUSABLE = 'a[href], button:not([disabled]), input:not([type=hidden]):not([disabled]), select, textarea, summary';

  function drawerButton() {
    return document.querySelector('button[aria-controls=sidebar]');
  }

  function isOpen(button) {
    return button.getAttribute('aria-expanded') === 'true';
  }

  // Its first control that can take the focus: one the narrow screen hides (its logo,
  // already in the top bar) can't.
  function focusFirst(drawer) {
    var controls = drawer.querySelectorAll(FOCUSABLE);
    for (var i = 0; i < controls.length; i++) {
      controls[i].focus();
      if (document.activeElement === controls[i]) { return; }
    }
  }

  function setOpen(button, open) {
    var drawer = document.getElementById(button.getAttribute('aria-controls'));
    var shell = document.getElementById('shell');
    var main = document.getElementById('main');
    if (!drawer) { return; }
    button.setAttribute('aria-expanded', open ? 'true' : 'false');
    if (shell) { shell.classList.toggle('drawer-open', open); }
    if (main) { main.inert = open; } // under the drawer: neither tabbed to nor read out
    if (open) { focusFirst(drawer); }
  }

  // Closed by Escape or a click outside: the focus goes back where it came from.
  function closeToButton(button) {
    setOpen(button, false);
    button.focus();
  }

  body.addEventListener('click', function (evt) {
    var button = drawerButton();
    if (!button || !evt.target || !evt.target.closest) { return; }
    if (button.contains(evt.target)) {
      setOpen(button, !isOpen(button));
      return;
    }
    if (!isOpen(button)) { return; }
    var drawer = document.getElementById(button.getAttribute('aria-controls'));
    if (!drawer || !drawer.contains(evt.target)) {
      closeToButton(button); // a click outside it
    } else if (evt.target.closest('a[href]')) {
      setOpen(button, false); // a chat chosen: the page it opens has the focus
    }
  });

  // A search from the drawer's box swaps in its results beside it: show them.
  body.addEventListener('submit', function (evt) {
    var button = drawerButton();
    if (!button || !isOpen(button)) { return; }
    var drawer = document.getElementById(button.getAttribute('aria-controls'));
    if (drawer && drawer.contains(evt.target) && evt.target.getAttribute('role') === 'search') {
      setOpen(button, false);
    }
  });

  body.addEventListener('keydown', function (evt) {
    if (evt.key !== 'Escape') { return; }
    var button = drawerButton();
    if (!button || !isOpen(button)) { return; }
    evt.preventDefault();
    closeToButton(button);
  });
})();
