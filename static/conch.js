/*
 * Conch's page behaviour, on top of htmx and its ws extension.
 *
 * - Every push starts with #conch-seq carrying the event's sequence number, or
 *   the first and last of a run of events the server heard together.
 * - A running reply's words come in pushes of their own, marked data-kind="words":
 *   they take no number, so they neither move the page's number nor make a gap,
 *   and words for a reply the page doesn't show (it ended) are dropped.
 * - An answer or a refetch is marked with the number its regions were read at:
 *   a push no newer than what the page shows is dropped, and regions older than
 *   a push already shown are fetched again.
 *   A gap in the numbers, a reconnect, or a hello that says the page is
 *   behind makes the page fetch its regions again (data-regions on #shell).
 * - A link that opens another chat in place (hx-get, hx-target="body") swaps
 *   in that chat's whole shell: its number, its regions and its own socket.
 * - The socket reconnects after any close. The ws extension only retries
 *   after an abnormal close (1006, 1011-1013); Daphne's websocket_timeout
 *   closes cleanly (1000), so that and every other close are retried here.
 * - A socket closed because the session ended (signed out, expired) reloads
 *   the page, which then asks for the sign-in.
 * - A chat's row comes alone (or with the others a run of events changed): it
 *   is put in its place in the list (data-sort), under its heading, or taken
 *   away, and marked if it is the chat this tab shows.
 * - The browser's time zone goes to the server in a cookie, for the list's days.
 * - The tab says when it is offline.
 * - The composer: Enter sends, Shift+Enter makes a new line; on a touch
 *   screen, whose keyboard has no Shift+Enter to speak of, Enter makes a new
 *   line and only the Send button sends (workspace.html's hint says which). It shows
 *   "Sending…", clears only after the server took the message, and keeps
 *   the text when a send fails.
 *
 * No inline script, no eval: the page's Content-Security-Policy forbids both.
 */
(function () {
  'use strict';

  var RETRYING_CODES = [1006, 1011, 1012, 1013]; // the ws extension retries these itself
  var SIGNED_OUT = 4401; // the session ended (chats/consumers.py): reload, to the sign-in
  var body = document.body;

  function shellData(name) {
    var shell = document.getElementById('shell');
    return shell ? shell.getAttribute(name) : null;
  }

  var lastSeq = parseInt(shellData('data-seq') || '0', 10);
  var opens = 0;
  var ownRetries = 0;
  var leaving = false; // the page is navigating away
  // A push can carry a run of events (data-first to data-seq), heard together.
  var SEQ_MARK = /^\s*<span id="conch-seq" data-seq="(\d+)" data-kind="(\w+)"(?: data-first="(\d+)")?/;

  // A gentler back-off than the extension's default (which can wait 64 s).
  htmx.config.wsReconnectDelay = function (retryCount) {
    return reconnectDelay(retryCount);
  };

  function reconnectDelay(retryCount) {
    var ceiling = Math.min(10000, 250 * Math.pow(2, retryCount));
    return ceiling / 2 + Math.random() * ceiling / 2;
  }

  // ---------------------------------------------------------------- refetch

  var fetching = false;
  var fetchAgain = false;

  function refetch() {
    var url = shellData('data-regions');
    if (!url) { return; }
    if (fetching) { fetchAgain = true; return; }
    fetching = true;
    body.setAttribute('data-refetches', String(parseInt(body.getAttribute('data-refetches') || '0', 10) + 1));
    htmx.ajax('GET', url, { source: body, swap: 'none' }).finally(function () {
      fetching = false;
      if (fetchAgain) { fetchAgain = false; refetch(); }
    });
  }

  // ---------------------------------------------------------------- the socket

  function setOnline(online) {
    var banner = document.getElementById('offline');
    if (banner) { banner.hidden = online; }
    body.classList.toggle('is-offline', !online);
    body.setAttribute('data-socket', online ? 'open' : 'closed');
  }

  body.addEventListener('htmx:wsOpen', function () {
    opens += 1;
    ownRetries = 0;
    body.setAttribute('data-socket-opens', String(opens));
    setOnline(true);
  });

  body.addEventListener('htmx:wsClose', function (evt) {
    setOnline(false);
    var code = evt.detail.event && evt.detail.event.code;
    body.setAttribute('data-socket-closed', String(code));
    if (code === SIGNED_OUT) {
      // A tab already navigating (its own Sign out) is on its way to the sign-in:
      // don't race it, unless it is somehow still here a moment later.
      window.setTimeout(function () { window.location.reload(); }, leaving ? 3000 : 0);
      return;
    }
    var wrapper = evt.detail.socketWrapper;
    if (RETRYING_CODES.indexOf(code) >= 0 || !wrapper || !body.contains(evt.target)) { return; }
    // A clean close from the server (its timeout, a restart): reconnect ourselves.
    var delay = reconnectDelay(ownRetries);
    ownRetries += 1;
    window.setTimeout(function () {
      if (body.contains(evt.target)) { wrapper.reconnect(); }
    }, delay);
  });

  body.addEventListener('htmx:wsError', function () { setOnline(false); });
  window.addEventListener('beforeunload', function () { leaving = true; });
  window.addEventListener('offline', function () { setOnline(false); });

  // A running reply's words (data-kind="words") take no number. Words for a reply the
  // page doesn't show (it ended, or the push that starts it is still on its way) have
  // nowhere to go and need none: only the parts whose place is in the page go in.
  function wordsSwap(message) {
    var parts = document.createElement('template');
    parts.innerHTML = message;
    var children = Array.prototype.slice.call(parts.content.children);
    for (var i = 0; i < children.length; i++) {
      if (!children[i].id || !document.getElementById(children[i].id)) { children[i].remove(); }
    }
    if (parts.content.children.length) { htmx.swap(body, parts.innerHTML, { swapStyle: 'none' }); }
  }

  body.addEventListener('htmx:wsBeforeMessage', function (evt) {
    var match = SEQ_MARK.exec(evt.detail.message || '');
    if (!match) { return; }
    var seq = parseInt(match[1], 10);
    var kind = match[2];
    if (kind === 'words') {
      evt.preventDefault();
      wordsSwap(evt.detail.message);
      return;
    }
    if (kind === 'hello') {
      // Each (re)connect: a page that was away, or rendered before the socket
      // opened and missed something, fetches its regions again.
      if (opens > 1 || seq !== lastSeq) { refetch(); }
      lastSeq = Math.max(lastSeq, seq);
      return;
    }
    if (seq <= lastSeq) {
      // Nothing the page doesn't show already: every event up to lastSeq is in it, and
      // this push, rendered before an answer or refetch that came first, may be older.
      evt.preventDefault();
      return;
    }
    var first = match[3] ? parseInt(match[3], 10) : seq;
    if (first > lastSeq + 1) { refetch(); } // an event was lost on the way
    lastSeq = seq;
  });

  // An answer to a request, or a refetch, is marked with the number read before its
  // regions (data-kind="answer"): every event up to it is in them. One older than a
  // push the page has shown put older regions over newer ones: fetch them again. Once:
  // a refetch older still means the page's number is ahead of the server's (its store
  // was put back), and the server's number is taken, rather than fetching for ever.
  var ANSWER_MARK = /<span id="conch-seq" data-seq="(\d+)" data-kind="answer"/;
  var olderAnswers = 0;

  function answered(text) {
    var match = ANSWER_MARK.exec(text || '');
    if (!match) { return; }
    var seq = parseInt(match[1], 10);
    if (seq < lastSeq && olderAnswers < 1) {
      olderAnswers += 1;
      refetch();
      return;
    }
    olderAnswers = 0;
    lastSeq = seq;
  }

  body.addEventListener('htmx:afterRequest', function (evt) {
    var xhr = evt.detail.xhr;
    if (xhr && (xhr.status === 200 || REFUSALS.indexOf(xhr.status) >= 0)) { answered(xhr.responseText); }
  });

  // Every push's swaps find their targets (a row goes through the list, below);
  // should one miss all the same (a page from another version), fetch the regions again.
  body.addEventListener('htmx:oobErrorNoTarget', function () { refetch(); });

  // ---------------------------------------------------------------- the list

  // A chat's row is pushed alone, inside a swap into #chat-rows (chats/regions.py's
  // render_rows_push), the same for every tab. Here it takes the place of the row it
  // was, in the list's order: data-sort, greatest first, as the server orders the
  // list. A row marked data-gone (a chat deleted or archived) is taken away. The
  // row of the chat this tab shows is marked here, since the push is not the tab's own.
  //
  // The list is grouped under headings (Needs you, Pinned, Today…). A group holds a run
  // of the sort keys, from its data-starts down, so a row goes under the first heading
  // its key reaches: the server decides the groups, in the person's days; a pushed row
  // needs no day of its own. A heading with no rows left is hidden.

  function markCurrent(row) {
    var link = row.querySelector('a');
    if (!link) { return; }
    if (row.id === 'row-' + shellData('data-chat')) {
      link.setAttribute('aria-current', 'page');
    } else {
      link.removeAttribute('aria-current');
    }
  }

  function showGroups(list) {
    var groups = list.querySelectorAll('[data-starts]');
    for (var i = 0; i < groups.length; i++) {
      groups[i].hidden = !groups[i].querySelector('li[data-sort]');
    }
    var empty = list.querySelector('.empty');
    if (empty) { empty.hidden = !!list.querySelector('li[data-sort]'); }
  }

  function groupFor(list, key) {
    var groups = list.querySelectorAll('[data-starts]');
    for (var i = 0; i < groups.length; i++) {
      if (key >= groups[i].getAttribute('data-starts')) { return groups[i].querySelector('ul'); }
    }
    return null;
  }

  function placeRow(list, row) {
    var was = document.getElementById(row.id);
    if (was) { was.remove(); }
    if (row.hasAttribute('data-gone')) { return; }
    markCurrent(row);
    var key = row.getAttribute('data-sort');
    var group = groupFor(list, key);
    if (!group) { refetch(); return; } // a list from another version: fetch it whole
    var others = group.querySelectorAll('li[data-sort]');
    for (var i = 0; i < others.length; i++) {
      if (others[i].getAttribute('data-sort') < key) {
        group.insertBefore(row, others[i]);
        return;
      }
    }
    group.appendChild(row);
  }

  body.addEventListener('htmx:oobBeforeSwap', function (evt) {
    var list = evt.detail.target;
    if (!list || list.id !== 'chat-rows') { return; }
    evt.detail.shouldSwap = false;
    var rows = Array.prototype.slice.call(evt.detail.fragment.children);
    for (var i = 0; i < rows.length; i++) { placeRow(list, rows[i]); }
    showGroups(list);
  });

  // The person's time zone, for the server to group the list by their own days. A list
  // grouped in another (the first page, before the browser said which) is fetched again,
  // once; and again when the day turns, so Today's chats move under Yesterday.
  var ZONE_COOKIE = 'conch_tz';
  var zone = '';
  try { zone = Intl.DateTimeFormat().resolvedOptions().timeZone || ''; } catch (e) { zone = ''; }
  if (!/^[A-Za-z0-9_+\-\/]{1,64}$/.test(zone)) { zone = ''; } // a name, as the server reads it
  if (zone) {
    document.cookie = ZONE_COOKIE + '=' + zone + '; path=/; max-age=31536000; SameSite=Lax';
  }

  var regroupTimer = null;

  function listChanged(checkZone) {
    var list = document.getElementById('chat-rows');
    if (!list) { return; }
    if (regroupTimer) { window.clearTimeout(regroupTimer); }
    var at = parseInt(list.getAttribute('data-regroup-at') || '0', 10);
    if (at) {
      // A second after midnight, so the server's clock has turned too; at most a day.
      var wait = Math.min(Math.max(at - Date.now(), 0) + 1000, 86400000);
      regroupTimer = window.setTimeout(refetch, wait);
    }
    if (checkZone && zone && list.getAttribute('data-time-zone') !== zone) { refetch(); }
  }

  body.addEventListener('htmx:oobAfterSwap', function (evt) {
    if (evt.detail.target && evt.detail.target.id === 'chat-list') { listChanged(false); }
  });

  // ---------------------------------------------------------------- responses

  // A refusal (400, or 409 for something that changed meanwhile) carries its
  // message as an out-of-band swap into the error slot.
  var REFUSALS = [400, 409];

  body.addEventListener('htmx:beforeSwap', function (evt) {
    if (evt.detail.xhr && REFUSALS.indexOf(evt.detail.xhr.status) >= 0) {
      evt.detail.shouldSwap = true;
      evt.detail.isError = false;
    }
  });

  // A form whose region a push replaced while its request was out: htmx drops the
  // answer (its events leave from a form no longer in the page), so the answer's
  // regions and its refusal (a Cancel that came too late) are swapped in here.
  body.addEventListener('htmx:beforeRequest', function (evt) {
    var form = evt.detail.elt;
    var xhr = evt.detail.xhr;
    if (!form || form.tagName !== 'FORM' || !xhr) { return; }
    var lost = false;
    xhr.addEventListener('readystatechange', function () { // before htmx's onload
      if (xhr.readyState === 4) { lost = !body.contains(form); }
    });
    xhr.addEventListener('loadend', function () {
      var answered = xhr.status === 200 || REFUSALS.indexOf(xhr.status) >= 0;
      if (lost && answered && xhr.responseText) {
        htmx.swap(body, xhr.responseText, { swapStyle: 'none' });
      }
    });
  });

  // Any other failure (a network error, a 404, a 500) says so where the person
  // is looking. The composer's text is only cleared after a success, so it stays.
  function showFailure(evt, message) {
    var form = evt.detail.elt;
    var slot = form && form.id === 'composer' ? document.getElementById('composer-error')
      : document.getElementById('flash');
    if (slot) { slot.textContent = message; slot.hidden = false; }
  }

  body.addEventListener('htmx:sendError', function (evt) {
    showFailure(evt, 'Conch could not be reached. Nothing was lost: try again when it is back.');
  });

  body.addEventListener('htmx:responseError', function (evt) {
    var status = evt.detail.xhr ? evt.detail.xhr.status : 0;
    if (REFUSALS.indexOf(status) >= 0) { return; }
    showFailure(evt, status === 404 ? 'That chat is gone.' : 'That did not work (the server said ' + status + ').');
  });

  body.addEventListener('htmx:afterRequest', function (evt) {
    var form = evt.detail.elt;
    if (!form || form.tagName !== 'FORM' || !evt.detail.successful) { return; }
    if (form.id === 'composer') {
      form.reset();
      var text = form.querySelector('textarea');
      if (text) { text.value = ''; text.focus(); }
    }
    if (form.hasAttribute('data-closes-details')) {
      var details = form.closest('details');
      if (details) { details.open = false; }
    }
  });

  // ---------------------------------------------------------------- composer

  var TOUCH = '(pointer: coarse)'; // as conch.css's, which shows the hint that goes with it

  body.addEventListener('keydown', function (evt) {
    var target = evt.target;
    if (!target || !target.matches || !target.matches('textarea[data-enter-sends]')) { return; }
    if (evt.key !== 'Enter' || evt.shiftKey || evt.isComposing || evt.altKey || evt.ctrlKey || evt.metaKey) { return; }
    if (window.matchMedia(TOUCH).matches) { return; } // asked at each key: a tablet may gain a mouse
    evt.preventDefault();
    var form = target.form;
    if (form && !form.classList.contains('htmx-request')) { form.requestSubmit(); }
  });

  // ---------------------------------------------------------------- transcript

  // Stay at the bottom of the transcript when it grows, if that is where the person was.
  var stickToBottom = true;

  function atBottom() {
    return window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 48;
  }

  window.addEventListener('scroll', function () { stickToBottom = atBottom(); }, { passive: true });

  body.addEventListener('htmx:oobAfterSwap', function (evt) {
    if (evt.detail.target && evt.detail.target.id === 'transcript' && stickToBottom) {
      window.scrollTo(0, document.documentElement.scrollHeight);
    }
  });

  // ---------------------------------------------------------------- "editing files · 40 s"

  function formatDuration(seconds) {
    if (seconds < 60) { return seconds + ' s'; }
    var minutes = Math.floor(seconds / 60);
    if (minutes < 60) { return minutes + ' min'; }
    var hours = Math.floor(minutes / 60);
    minutes = minutes % 60;
    return minutes ? hours + ' h ' + minutes + ' min' : hours + ' h';
  }

  function tick() {
    var now = Date.now();
    var clocks = document.querySelectorAll('.since[data-elapsed]');
    for (var i = 0; i < clocks.length; i++) {
      var clock = clocks[i];
      if (!clock.hasAttribute('data-t0')) {
        clock.setAttribute('data-t0', String(now - parseInt(clock.getAttribute('data-elapsed'), 10) * 1000));
      }
      var seconds = Math.max(0, Math.floor((now - parseInt(clock.getAttribute('data-t0'), 10)) / 1000));
      clock.textContent = formatDuration(seconds);
    }
  }

  window.setInterval(tick, 1000);

  function toTheEnd() {
    if (document.getElementById('transcript')) {
      window.scrollTo(0, document.documentElement.scrollHeight);
    }
  }

  // Another chat's page, swapped in by a link on a card: it starts afresh, at
  // its own number, and its socket (a new one) says hello as on a first load.
  var currentShell = document.getElementById('shell');

  body.addEventListener('htmx:afterSwap', function () {
    var shell = document.getElementById('shell');
    if (!shell || shell === currentShell) { return; }
    currentShell = shell;
    lastSeq = parseInt(shellData('data-seq') || '0', 10);
    opens = 0;
    ownRetries = 0;
    stickToBottom = true;
    toTheEnd();
    listChanged(true);
  });

  toTheEnd();
  listChanged(true);
})();
