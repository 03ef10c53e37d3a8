/*
 * The theme: the system's (light or dark, as it says), or the one the person
 * chose in the sidebar, remembered by this browser (localStorage).
 *
 * Loaded in <head> and not deferred, before the stylesheets: it puts the choice
 * on <html> (data-theme="light" or "dark") before the first paint, so a chosen
 * theme never flashes the other one. With no choice there is no data-theme, and
 * conch.css follows prefers-color-scheme.
 *
 * The switch is the radio buttons named "theme" (workspace.html, the sidebar's
 * foot): listened to on the document, so a switch swapped in by htmx works too.
 * Another tab's choice applies here at once (the storage event).
 *
 * No inline script, no eval: the page's Content-Security-Policy forbids both.
 */
(function () {
  'use strict';

  var KEY = 'conch-theme';
  var CHOSEN = ['light', 'dark']; // anything else is "system"
  var root = document.documentElement;

  function stored() {
    try {
      var theme = window.localStorage.getItem(KEY);
      return CHOSEN.indexOf(theme) >= 0 ? theme : 'system';
    } catch (e) {
      return 'system'; // storage refused (a locked-down browser): the system's theme
    }
  }

  function apply(theme) {
    if (CHOSEN.indexOf(theme) >= 0) {
      root.setAttribute('data-theme', theme);
    } else {
      root.removeAttribute('data-theme');
    }
  }

  function remember(theme) {
    try {
      if (CHOSEN.indexOf(theme) >= 0) {
        window.localStorage.setItem(KEY, theme);
      } else {
        window.localStorage.removeItem(KEY);
      }
    } catch (e) { /* this page keeps it, the next one won't */ }
  }

  // The switch is rendered hidden (it needs this script) and without a choice (the
  // server can't know it): show it, with the choice checked.
  function showChoice() {
    var theme = stored();
    var radios = document.querySelectorAll('input[type=radio][name=theme]');
    for (var i = 0; i < radios.length; i++) {
      radios[i].checked = radios[i].value === theme;
      var group = radios[i].closest('fieldset');
      if (group) { group.hidden = false; }
    }
  }

  apply(stored());

  document.addEventListener('change', function (evt) {
    var radio = evt.target;
    if (!radio || radio.name !== 'theme' || radio.type !== 'radio' || !radio.checked) { return; }
    remember(radio.value);
    apply(radio.value);
  });

  window.addEventListener('storage', function (evt) {
    if (evt.key !== KEY && evt.key !== null) { return; }
    apply(stored());
    showChoice();
  });

  document.addEventListener('DOMContentLoaded', showChoice);
  document.addEventListener('htmx:afterSettle', showChoice); // a swapped-in page brings its switch unset
})();
