// page/notices.js: the one notice bar (unreachable, refused, microphone blocked, reconnecting…)
// with an optional Retry and an optional timeout.

import { $ } from "./dom.js";

let noticeTimer = null;

export function showNotice(kind, title, body, { retry = false, autoHideMs = 0 } = {}) {
  const n = $("notice");
  n.dataset.kind = kind;
  $("notice-title").textContent = title;
  $("notice-body").textContent = body;
  $("retry").hidden = !retry;
  n.hidden = false;
  clearTimeout(noticeTimer);
  if (autoHideMs) noticeTimer = setTimeout(hideNotice, autoHideMs);
}

export function hideNotice() {
  $("notice").hidden = true;
  delete $("notice").dataset.kind;
}

/** @returns {string | undefined} the kind of the notice shown */
export function noticeKind() {
  return $("notice").dataset.kind;
}
