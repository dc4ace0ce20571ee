// page/dom.js: the page's one DOM helper.

/** @param {string} id @returns {HTMLElement} */
export const $ = (id) => document.getElementById(id);
