// page/playbooks.js: the playbook picker, filled from the server's GET /playbooks.

import { $ } from "./dom.js";

/**
 * Fill the picker from GET /playbooks; hidden on 404 or with fewer than two playbooks.
 * @param {string} wanted the playbook asked for (`?playbook=`), chosen when it is listed
 * @param {(id: string, label: string) => void} onChange another one was picked
 * @returns {Promise<string>} the playbook chosen now (`wanted` when there is no picker)
 */
export async function loadPlaybooks(wanted, onChange) {
  let list;
  let serverDefault;
  try {
    const res = await fetch(new URL("playbooks", location.href), {
      headers: { accept: "application/json" },
    });
    if (!res.ok) return wanted;
    const body = await res.json();
    // voice_server answers {default, playbooks: [{id, description, ...}]}; a bare list works too
    list = Array.isArray(body) ? body : Array.isArray(body?.playbooks) ? body.playbooks : [];
    serverDefault = Array.isArray(body) ? undefined : body?.default;
  } catch {
    return wanted;
  }
  const items = list.map((p) => (typeof p === "string" ? { id: p, name: p }
    : { id: String(p.id ?? p.name ?? ""), name: String(p.name ?? p.title ?? p.id ?? ""),
      description: p.description ?? "" })).filter((p) => p.id);
  if (items.length < 2) return wanted;
  const select = $("playbook");
  if (serverDefault === null) {
    // the server runs without a playbook unless asked: offer that too
    items.unshift({ id: "", name: "No playbook", description: "the plain assistant" });
  }
  for (const p of items) {
    const opt = document.createElement("option");
    opt.value = p.id;
    opt.textContent = p.name;
    if (p.description) opt.title = p.description;
    select.append(opt);
  }
  if (wanted && items.some((p) => p.id === wanted)) select.value = wanted;
  else if (serverDefault && items.some((p) => p.id === serverDefault)) select.value = serverDefault;
  $("playbook-picker").hidden = false;
  select.addEventListener("change", () => {
    onChange(select.value, select.selectedOptions[0]?.textContent ?? select.value);
  });
  return select.value;
}
