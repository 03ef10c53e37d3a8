/*
 * Keyboard and focus in the workspace.
 *
 * - After an action whose form carries data-focus-after="<selector>", focus
 *   lands there once its regions are swapped in: the pressed mode after a
 *   mode change, the message box after Stop. The form itself may be gone by
 *   then (its region was replaced), so this listens to the request itself.
 * - A menu (<details class="menu">) closed after its form was answered
 *   (data-closes-details, as Rename) gives focus back to its summary.
 * - A region pushed again over the socket keeps the focus on the control
 *   that had it (found again by its id), so a push never drops it to the page,
 *   the words typed into its boxes (a deny's reason, an edited message), and the
 *   menus open in it (found again by their ids): a running reply pushes the chat's
 *   settings at each step, and "Allowed without asking" must stay open for its
 *   Take back to be pressed. Only the person, or a form that closes its menu, closes one.
 * - Escape closes the open menu it is in, or any open menu, and focuses its summary.
 * - Shortcuts: Ctrl+K or / searches (opening the chat list's drawer on a phone),
 *   Shift+Esc goes to the message box, Ctrl+Shift+O starts a new chat, ? lists them
 *   (the dialog #shortcuts in base.html).
 * - The tab's title follows the chat's title (Rename here, or in another tab).
 *
 * No inline script, no eval: the page's Content-Security-Policy forbids both.
 */
(function () {
  'use strict';

  var body = document.body;

  function focusSoon(element) {
    if (!element) { return; }
    // After the swap has settled: htmx settles attributes a moment later.
    window.setTimeout(function () {
      var target = element.id ? document.getElementById(element.id) || element : element;
      if (target && document.body.contains(target)) { target.focus(); }
    }, 0);
  }

  function summaryOf(details) {
    if (!details) { return null; }
    var live = details.id ? document.getElementById(details.id) : details;
    return (live || details).querySelector('summary');
  }

  // Heard from the request itself, once it has loaded and htmx has swapped in what
  // it brought: the form's region may have been replaced by then, and htmx's own
  // events would come from somewhere else, or not reach the body at all.
  body.addEventListener('htmx:beforeRequest', function (evt) {
    var form = evt.detail.elt;
    var xhr = evt.detail.xhr;
    if (!form || form.tagName !== 'FORM' || !xhr) { return; }
    if (!form.hasAttribute('data-focus-after') && !form.hasAttribute('data-closes-details')) { return; }
    xhr.addEventListener('loadend', function () {
      if (xhr.status >= 200 && xhr.status < 300) { answered(form); }
    });
  });

  function answered(form) {
    var selector = form.getAttribute('data-focus-after');
    if (selector) {
      window.setTimeout(function () { focusSoon(document.querySelector(selector)); }, 0);
      return;
    }
    var details = form.closest('details');
    if (details) {
      // The menu as the page has it now: a region swapped in again kept it open.
      var live = details.id ? document.getElementById(details.id) || details : details;
      live.open = false;
      focusSoon(summaryOf(live));
    }
  }

  // ---------------------------------------------------------------- focus across pushes

  var refocus = null; // the id of the focused control inside a region being replaced

  // And the words typed into a box of a region being replaced (a deny's reason, an
  // edited message): found again by the box's id, they are put back, caret and all.
  // Not the words of a form being sent: those are said, and its fresh form starts empty.
  var typed = {}; // id -> {value, start, end}
  var menus = {}; // ids of the open menus of a region being replaced
  var sending = {}; // ids of the boxes of forms whose request is under way

  body.addEventListener('htmx:beforeRequest', function (evt) {
    var form = evt.detail.elt;
    var xhr = evt.detail.xhr;
    if (!form || form.tagName !== 'FORM' || !xhr) { return; }
    var ids = [];
    form.querySelectorAll('[id]').forEach(function (box) { ids.push(box.id); sending[box.id] = true; });
    xhr.addEventListener('loadend', function () {
      // After htmx has swapped in what the answer brought (its own load handler ran first).
      window.setTimeout(function () { ids.forEach(function (id) { delete sending[id]; }); }, 0);
    });
  });

  body.addEventListener('htmx:oobBeforeSwap', function (evt) {
    var target = evt.detail.target;
    var active = document.activeElement;
    if (target && active && active !== body && active.id && target.contains(active)) {
      refocus = active.id;
    }
    if (!target || !target.querySelectorAll) { return; }
    target.querySelectorAll('details.menu[open][id]').forEach(function (menu) { menus[menu.id] = true; });
    target.querySelectorAll('textarea[id], input[id]:not([type]), input[id][type=text]').forEach(function (box) {
      if (box.value !== box.defaultValue && !sending[box.id]) {
        typed[box.id] = { value: box.value, start: box.selectionStart, end: box.selectionEnd };
      }
    });
  });

  function typedAgain() {
    Object.keys(typed).forEach(function (id) {
      var box = document.getElementById(id);
      var kept = typed[id];
      delete typed[id];
      if (!box || box.value === kept.value) { return; }
      box.value = kept.value;
      if (kept.start !== null && box.setSelectionRange) {
        box.setSelectionRange(kept.start, kept.end);
      }
    });
  }

  function focusAgain(id) {
    var again = document.getElementById(id);
    var active = document.activeElement;
    if (again && (!active || active === body)) { again.focus({ preventScroll: true }); }
  }

  function menusAgain() {
    Object.keys(menus).forEach(function (id) {
      delete menus[id];
      var menu = document.getElementById(id);
      if (menu && menu.tagName === 'DETAILS') { menu.open = true; }
    });
  }

  body.addEventListener('htmx:oobAfterSwap', function () {
    menusAgain();
    typedAgain();
    if (!refocus) { return; }
    var id = refocus;
    refocus = null;
    // At once, in the same task as the swap: a key pressed just then (Enter on Stop)
    // reaches the new control, never the page's body.
    focusAgain(id);
    // And once every handler of this swap has run (conch-steps.js opens the steps
    // that were open), in case one of them moved it.
    window.setTimeout(function () { focusAgain(id); }, 0);
  });

  // ---------------------------------------------------------------- Escape

  body.addEventListener('keydown', function (evt) {
    if (evt.key !== 'Escape' || evt.defaultPrevented) { return; }
    var inside = evt.target && evt.target.closest ? evt.target.closest('details.menu[open]') : null;
    var open = inside ? [inside] : Array.prototype.slice.call(document.querySelectorAll('details.menu[open]'));
    if (!open.length) { return; }
    evt.preventDefault();
    open.forEach(function (details) { details.open = false; });
    var summary = open[0].querySelector('summary');
    if (summary) { summary.focus(); }
  });

  // ---------------------------------------------------------------- shortcuts

  // Ctrl+K or / : search. Shift+Esc : the message box. Ctrl+Shift+O : a new chat.
  // ? : the list of shortcuts. / and ? are text in a field, so they count only outside one.
  function typing(target) {
    if (!target || !target.closest) { return false; }
    return !!target.closest('input, textarea, select, [contenteditable="true"]');
  }

  // On a narrow screen the search box is in the chat list's drawer: open it first.
  function searchBox() {
    var box = document.getElementById('search-q');
    var button = document.querySelector('button[aria-controls=sidebar][aria-expanded=false]');
    if (box && button && box.checkVisibility && !box.checkVisibility({ visibilityProperty: true })) { button.click(); }
    return box;
  }

  function focusField(element) {
    if (!element) { return false; }
    element.focus();
    if (element.select && element.type === 'search') { element.select(); }
    return true;
  }

  function newChatField() {
    var form = document.getElementById('new-chat');
    return form ? form.querySelector('input:not([type=hidden]), select, textarea') : null;
  }

  body.addEventListener('keydown', function (evt) {
    if (evt.defaultPrevented || evt.altKey) { return; }
    var ctrl = evt.ctrlKey || evt.metaKey;
    var key = evt.key;
    if ((ctrl && !evt.shiftKey && (key === 'k' || key === 'K')) || (key === '/' && !ctrl && !typing(evt.target))) {
      if (focusField(searchBox())) { evt.preventDefault(); }
      return;
    }
    if (key === 'Escape' && evt.shiftKey && !ctrl) {
      if (focusField(document.getElementById('composer-text'))) { evt.preventDefault(); }
      return;
    }
    if (ctrl && evt.shiftKey && (key === 'o' || key === 'O')) {
      evt.preventDefault();
      if (!focusField(newChatField())) { window.location.assign('/#new-chat-heading'); }
      return;
    }
    if (key === '?' && !ctrl && !typing(evt.target)) {
      var help = document.getElementById('shortcuts');
      if (help && help.showModal && !help.open) { evt.preventDefault(); help.showModal(); }
    }
  });

  // Arriving at the new-chat form (the "New chat" link, Ctrl+Shift+O): its first field.
  body.addEventListener('click', function (evt) {
    var close = evt.target && evt.target.closest ? evt.target.closest('[data-closes-dialog]') : null;
    var dialog = close ? close.closest('dialog') : null;
    if (dialog) { dialog.close(); }
  });

  // A chat page opens with the cursor in the message box. Not an autofocus attribute:
  // htmx would honour it again at every push that redraws the composer.
  var composer = document.getElementById('composer-text');
  if (composer && (!document.activeElement || document.activeElement === body)) {
    composer.focus({ preventScroll: true });
  }

  // After the browser has gone to the fragment, which would take the focus back.
  if (window.location.hash === '#new-chat-heading') {
    window.addEventListener('load', function () {
      window.setTimeout(function () { focusField(newChatField()); }, 0);
    });
  }

  // ---------------------------------------------------------------- the tab's title

  function titleFromHeading() {
    var heading = document.getElementById('chat-heading');
    if (!heading) { return; }
    var title = heading.textContent.trim() + ' · Conch';
    if (document.title !== title) { document.title = title; }
  }

  body.addEventListener('htmx:oobAfterSwap', function (evt) {
    var target = evt.detail.target;
    if (target && target.id === 'chat-title') { titleFromHeading(); }
  });
})();
