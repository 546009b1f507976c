"""Browser tests of the pages as pages: every main page at both sizes (layout, labels, keyboard,
colour), under the Content-Security-Policy, the console's front door and each role's first
screen, hostile text shown as text, the notifications page. One of the browser folder's units
(tests/support/session/parallel.py)."""
