-- The auction of Liebig et al. (section 5): items labelled by category, and bids.
CREATE TABLE IF NOT EXISTS items (
    id bigint PRIMARY KEY,
    title text NOT NULL,
    category text NOT NULL,          -- the label: computer.hardware.misc
    high_bid double precision NOT NULL DEFAULT 0,
    high_bidder text,
    closed boolean NOT NULL DEFAULT false
);
CREATE TABLE IF NOT EXISTS bids (
    id bigserial PRIMARY KEY,
    item bigint NOT NULL REFERENCES items (id),
    bidder text NOT NULL,
    amount double precision NOT NULL
);
