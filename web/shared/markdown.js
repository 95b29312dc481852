// chatroom Markdown: agent-written text to a sanitised DOM fragment.
//
// An ES module for any page of chatroom (served at /assets/markdown.js for
// the /ui dashboard; inlined into the MCP App); load the vendored `marked`
// and DOMPurify (classic scripts, they set globals) before it. It exports:
//
//   render(text, { taskHref, me, inline }) -> DocumentFragment
//   plain(text) -> string   (the text without the markup)
//
// Rules it keeps, whatever an agent writes:
// - HTML in the text is shown as text, never parsed as markup; the
//   sanitiser after the renderer is a second wall, with an allow-list of
//   plain formatting tags and no attribute that can run or load anything.
// - Nothing loads: images become links, and links go only to http(s) or
//   mailto, in a new tab with rel="noopener noreferrer" (and no referrer).
// - `#N` becomes a link to task N (options.taskHref), `@name` a mention
//   (options.me marks the reader's own name), both outside code.
const root = globalThis;
const marked = root.marked;
const DOMPurify = root.DOMPurify;
if (!marked || !DOMPurify) throw new Error('ChatroomMarkdown needs marked and DOMPurify loaded first');

const ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
const escape = (s) => String(s).replace(/[&<>"']/g, (c) => ESC[c]);

// Our own instance, so the options never leak into another user of marked.
const md = new marked.Marked({ gfm: true, breaks: true, async: false });
md.use({
  renderer: {
    // Raw HTML an agent wrote is shown as what it is: text.
    html({ text }) {
      return escape(text);
    },
    // An image would load a resource: show a link to it instead.
    image({ href, text }) {
      return '<a href="' + escape(href || '') + '">' + escape('image: ' + (text || href || '')) + '</a>';
    },
    // A task-list box is not an input the reader could tick.
    checkbox({ checked }) {
      return checked ? '\u2611 ' : '\u2610 ';
    },
  },
});

const SAFE_URL = /^(?:https?:|mailto:)/i;
const purify = DOMPurify(root);
purify.addHook('afterSanitizeAttributes', (node) => {
  if (node.nodeName !== 'A') return;
  const href = node.getAttribute('href') || '';
  if (SAFE_URL.test(href)) {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer');
    node.setAttribute('referrerpolicy', 'no-referrer');
  } else {
    node.removeAttribute('href');
  }
});
const PURIFY = {
  ALLOWED_TAGS: [
    'a', 'p', 'br', 'strong', 'b', 'em', 'i', 'del', 's', 'code', 'pre', 'blockquote',
    'ul', 'ol', 'li', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'hr',
    'table', 'thead', 'tbody', 'tr', 'th', 'td',
  ],
  ALLOWED_ATTR: ['href', 'title', 'start', 'align'],
  ALLOWED_URI_REGEXP: SAFE_URL,
  ALLOW_DATA_ATTR: false,
  RETURN_DOM_FRAGMENT: true,
};

// `#12` (not inside a word or an entity) and `@name`, as in the server's
// mention rule (letters, digits, `_ . -`, trailing dots and dashes cut).
const REFS = /(^|[^\p{L}\p{N}_&#])#(\d{1,12})(?![\p{L}\p{N}_])|(^|[^\p{L}\p{N}_.@-])@([\p{L}\p{N}_.-]+)/gu;
const SKIP = new Set(['A', 'CODE', 'PRE']);

function decorate(frag, opts) {
  const doc = frag.ownerDocument;
  const walker = doc.createTreeWalker(frag, NodeFilter.SHOW_TEXT);
  const texts = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    let skip = false;
    for (let p = n.parentNode; p && p !== frag; p = p.parentNode) {
      if (SKIP.has(p.nodeName)) {
        skip = true;
        break;
      }
    }
    if (!skip && /[#@]/.test(n.data)) texts.push(n);
  }
  const me = opts.me ? String(opts.me).toLowerCase() : null;
  for (const node of texts) {
    const text = node.data;
    const out = [];
    let last = 0;
    REFS.lastIndex = 0;
    let m;
    while ((m = REFS.exec(text)) !== null) {
      if (m[2] !== undefined) {
        const start = m.index + m[1].length;
        const href = opts.taskHref ? opts.taskHref(Number(m[2])) : null;
        if (!href) continue;
        out.push(doc.createTextNode(text.slice(last, start)));
        const a = doc.createElement('a');
        a.className = 'task-link';
        a.setAttribute('href', href);
        a.dataset.task = m[2];
        a.textContent = '#' + m[2];
        out.push(a);
        last = start + 1 + m[2].length;
      } else {
        const start = m.index + m[3].length;
        const name = m[4].replace(/[.-]+$/, '');
        if (!name) continue;
        out.push(doc.createTextNode(text.slice(last, start)));
        const s = doc.createElement('span');
        s.className = me && name.toLowerCase() === me ? 'mention me' : 'mention';
        s.textContent = '@' + name;
        out.push(s);
        last = start + 1 + name.length;
        REFS.lastIndex = last;
      }
    }
    if (!out.length) continue;
    out.push(doc.createTextNode(text.slice(last)));
    node.replaceWith(...out);
  }
  // A wide table scrolls inside its own box, never the page.
  for (const t of frag.querySelectorAll('table')) {
    const wrap = doc.createElement('div');
    wrap.className = 'md-table';
    t.replaceWith(wrap);
    wrap.append(t);
  }
  return frag;
}

/** Agent text as a sanitised fragment: blocks, or one line with `inline`. */
export function render(text, options) {
  const opts = options || {};
  const src = String(text == null ? '' : text);
  const html = opts.inline ? md.parseInline(src) : md.parse(src);
  const frag = purify.sanitize(html, PURIFY);
  return decorate(frag, opts);
}

/** The text as a reader sees it, without the markup (for snippets). */
export function plain(text) {
  return render(text, {}).textContent.replace(/\s+/g, ' ').trim();
}

