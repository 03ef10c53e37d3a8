/*
 * The tab's title counts what needs you: "(2) Conch", and so does the top bar's
 * button on a narrow screen ("2 need you"), where the list is in a drawer. The
 * server renders both counts (so they are right without JavaScript); after every
 * push or swap this recounts the sidebar's rows that need you (a chat waiting for
 * an OK or an answer, or one holding a message for you: data-needs-you).
 */
(function () {
  'use strict';

  var COUNT = /^\(\d+\) /;

  function recount() {
    var list = document.getElementById('chat-rows');
    if (!list) { return; }
    var needs = list.querySelectorAll('li[data-needs-you]').length;
    var title = document.title.replace(COUNT, '');
    var wanted = needs ? '(' + needs + ') ' + title : title;
    if (document.title !== wanted) { document.title = wanted; }
    var badge = document.querySelector('[data-needs-count]');
    if (badge) {
      var words = needs + (needs === 1 ? ' needs you' : ' need you');
      if (badge.textContent !== words) { badge.textContent = words; }
      badge.hidden = !needs;
    }
  }

  document.body.addEventListener('htmx:oobAfterSwap', recount);
  document.body.addEventListener('htmx:wsAfterMessage', recount); // a row placed by conch.js
  document.body.addEventListener('htmx:afterSettle', recount);
  recount();
})();
